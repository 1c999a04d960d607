//! The lock of the allocator's short critical sections (central bag lists, span pools, the
//! heap pool): it spins briefly, then parks the waiter on a futex. It cannot allocate, is valid
//! when zeroed, and is held only for bounded work.
//!
//! Why park rather than yield: with more threads than cores (32 on 2 in mimalloc's stress test),
//! a holder is often preempted inside its section, or sleeps in a syscall it makes there (a
//! span's `madvise`). Waiters that `sched_yield` in a loop keep every core busy handing the CPU
//! to one another while the holder waits for its turn: ~130 yields per contended acquisition on
//! average, ~600 on the worst lock (`docs/JOURNAL.md`, "Threads that outnumber the cores").
//! A parked waiter takes no CPU until the holder releases and wakes it.
//!
//! The protocol is the classic three-state futex mutex: `UNLOCKED`, `LOCKED` (no waiter
//! parked), `CONTENDED` (a waiter may be parked). A waiter that parks first sets `CONTENDED`, so
//! the holder's release knows to wake one; a thread that takes the lock through that path keeps
//! it `CONTENDED` (it cannot know whether others still sleep), which at worst costs one wake
//! with nobody to wake.
//!
//! Fork safety is the caller's business: the global arena's `pthread_atfork` handlers take every
//! lock before `fork` and release them in parent and child, so a child never inherits a lock
//! that a vanished thread held (a release in the child wakes nobody: no thread sleeps there).

use crate::sync::{spin_hint, AtomicU32, Ordering};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// Polls before parking. A critical section is a few hundred instructions when its holder
/// runs; a `pause` costs ~40-140 cycles, so 100 polls wait out a running holder's section
/// (~5-15 us at most) and no longer: past that the holder is most likely preempted or in a
/// syscall, and spinning only takes the CPU it needs.
const SPINS_BEFORE_PARK: u32 = 100;

pub struct SpinLock {
    state: AtomicU32,
    /// Under loom, the kernel's futex: a waiter checks the state and sleeps under this mutex,
    /// and a wake notifies under it, so a wake between the check and the sleep is never lost
    /// (what `FUTEX_WAIT` guarantees), and a lost wake-up shows as a deadlock in the model.
    #[cfg(loom)]
    futex: (loom::sync::Mutex<()>, loom::sync::Condvar),
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
            state: AtomicU32::new(UNLOCKED),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        SpinLock {
            state: AtomicU32::new(UNLOCKED),
            futex: (loom::sync::Mutex::new(()), loom::sync::Condvar::new()),
        }
    }

    #[inline]
    pub fn lock(&self) -> SpinGuard<'_> {
        self.acquire();
        SpinGuard { lock: self }
    }

    /// [`SpinLock::lock`], and whether the first try failed and the caller had to wait: the
    /// statistics count contended acquisitions at the call sites that care (the class locks),
    /// at no cost to the uncontended path beyond the flag.
    #[inline]
    pub fn lock_noting_wait(&self) -> (SpinGuard<'_>, bool) {
        // Acquire: as in `acquire`.
        let waited = self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err();
        if waited {
            self.acquire_contended();
        }
        (SpinGuard { lock: self }, waited)
    }

    /// Takes the lock without a guard; pair with [`SpinLock::release`]. Used by the fork handlers,
    /// which hold locks across a function boundary.
    #[inline]
    pub fn acquire(&self) {
        // Acquire: what the previous holder wrote inside the section is visible to us.
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.acquire_contended();
        }
    }

    #[cold]
    #[inline(never)]
    fn acquire_contended(&self) {
        // Poll with plain loads (waiters do not bounce the cache line) while the holder may be
        // running; stop at once when someone is already parked: the holder is then slow. (Under
        // loom a relaxed load may legally re-read a stale value forever, so the model goes
        // straight to the swap below, whose read is always the latest.)
        #[cfg(not(loom))]
        for _ in 0..SPINS_BEFORE_PARK {
            match self.state.load(Ordering::Relaxed) {
                UNLOCKED
                    if self
                        .state
                        .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok() =>
                {
                    return;
                }
                CONTENDED => break,
                _ => {}
            }
            spin_hint();
        }
        #[cfg(loom)]
        let _ = (spin_hint, SPINS_BEFORE_PARK);
        // Announce a waiter, then sleep until the state changes; each pass either takes the
        // lock (the swap read UNLOCKED) or leaves it CONTENDED for the holder's release to see.
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            self.park();
        }
    }

    /// Releases a lock taken with [`SpinLock::acquire`] (or left held across `fork`).
    #[inline]
    pub fn release(&self) {
        // Release: our writes inside the section happen-before the next holder's reads.
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            self.unpark_one();
        }
    }

    /// Takes the lock if it is free (never waits).
    pub fn try_lock(&self) -> Option<SpinGuard<'_>> {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard { lock: self })
    }
}

impl SpinLock {
    /// Sleeps while the state reads `CONTENDED`. Should the kernel refuse the futex call, the
    /// waiter yields instead of spinning.
    #[cfg(not(loom))]
    fn park(&self) {
        if !crate::os::futex_wait(&self.state, CONTENDED) {
            crate::sync::yield_thread();
        }
    }

    #[cfg(not(loom))]
    fn unpark_one(&self) {
        crate::os::futex_wake(&self.state, 1);
    }

    #[cfg(loom)]
    fn park(&self) {
        let (mutex, condvar) = &self.futex;
        let guard = mutex.lock().unwrap();
        // A read-modify-write, not a load: it always sees the latest state (as the kernel's
        // check does), where a relaxed load could legally read a stale one in the model.
        if self.state.fetch_add(0, Ordering::Relaxed) == CONTENDED {
            drop(condvar.wait(guard).unwrap());
        }
    }

    #[cfg(loom)]
    fn unpark_one(&self) {
        let (mutex, condvar) = &self.futex;
        let _guard = mutex.lock().unwrap();
        condvar.notify_one();
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

    /// A counter that `threads` threads each increment `rounds` times under the lock; with
    /// `stall`, a holder sleeps inside its section now and then (as a preempted holder does).
    /// Returns the final count and the lock's state after the last release.
    fn count_under_lock(threads: u32, rounds: u32, stall: bool) -> (u64, u32) {
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
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    for round in 0..rounds {
                        let _guard = shared.lock.lock();
                        // SAFETY: the lock is held, so no other thread touches `value`.
                        unsafe { *shared.value.get() += 1 };
                        if stall && (round + id) % 500 == 0 {
                            std::thread::sleep(std::time::Duration::from_micros(200));
                        }
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let guard = shared.lock.lock();
        // SAFETY: the lock is held and all writers have joined.
        let count = unsafe { *shared.value.get() };
        drop(guard);
        (count, shared.lock.state.load(Ordering::Relaxed))
    }

    #[test]
    fn lock_gives_mutual_exclusion_under_contention() {
        assert_eq!(count_under_lock(4, 20_000, false).0, 80_000);
    }

    /// More threads than cores, and holders that stall: waiters park, every one is woken, and
    /// no increment is lost. A lost wake-up would hang this test.
    #[test]
    fn parked_waiters_are_all_woken_when_holders_stall() {
        assert_eq!(count_under_lock(16, 2_000, true), (32_000, UNLOCKED));
    }

    /// The fork handlers' pattern: taken with `acquire` in one function, released with
    /// `release` in another, while other threads wait parked.
    #[test]
    fn acquire_and_release_pair_across_calls_with_parked_waiters() {
        let lock = Arc::new(SpinLock::new());
        lock.acquire();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || drop(lock.lock()))
            })
            .collect();
        // The waiters mark the lock contended once they run (on a loaded machine, not at once).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while lock.state.load(Ordering::Relaxed) != CONTENDED {
            assert!(std::time::Instant::now() < deadline, "no waiter arrived");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        lock.release();
        for w in waiters {
            w.join().unwrap();
        }
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn lock_noting_wait_tells_a_wait_from_a_free_lock() {
        let lock = Arc::new(SpinLock::new());
        let (guard, waited) = lock.lock_noting_wait();
        assert!(!waited);
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock_noting_wait().1)
        };
        // The waiter's first try fails while we hold the lock; it parks, marking it contended.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while lock.state.load(Ordering::Relaxed) != CONTENDED {
            assert!(std::time::Instant::now() < deadline, "no waiter arrived");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(guard);
        assert!(waiter.join().unwrap());
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

/// loom models of the lock's protocol (its futex is a yield there):
/// `RUSTFLAGS="--cfg loom" cargo test -p nodalloc --release --lib ds::spinlock`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    struct Shared {
        lock: SpinLock,
        value: UnsafeCell<u32>,
    }

    // SAFETY: `value` is only touched while `lock` is held (loom checks it).
    unsafe impl Sync for Shared {}

    fn model(threads: u32) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(move || {
            let shared = Arc::new(Shared {
                lock: SpinLock::new(),
                value: UnsafeCell::new(0),
            });
            let handles: Vec<_> = (1..threads)
                .map(|_| {
                    let shared = shared.clone();
                    loom::thread::spawn(move || {
                        let _guard = shared.lock.lock();
                        // SAFETY: the lock is held; loom flags any concurrent access.
                        shared.value.with_mut(|v| unsafe { *v += 1 });
                    })
                })
                .collect();
            {
                let _guard = shared.lock.lock();
                // SAFETY: as above.
                shared.value.with_mut(|v| unsafe { *v += 1 });
            }
            for h in handles {
                h.join().unwrap();
            }
            let _guard = shared.lock.lock();
            // SAFETY: as above; every other thread has finished.
            assert_eq!(shared.value.with(|v| unsafe { *v }), threads);
        });
    }

    /// Two threads: mutual exclusion, and the unlocked state is reached again.
    #[test]
    fn two_threads_exclude_each_other() {
        model(2);
    }

    /// Three threads: one holds, two wait (the contended state); nobody is left waiting.
    #[test]
    fn three_threads_exclude_each_other_and_all_finish() {
        model(3);
    }
}
