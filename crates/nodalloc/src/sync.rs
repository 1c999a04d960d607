//! The one place that names the atomic types the lock-free structures use.
//!
//! Under `cfg(loom)` the same code is compiled against loom's model-checked atomics, so the
//! transfer ring, the inbox and the spin lock that ship are the ones the models explore
//! (`tests/loom.rs`). Nothing else in the crate is compiled under loom.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// A busy-wait hint; under loom a yield so the model can schedule another thread.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Gives the CPU away: the lock's fallback when the kernel refuses to park a waiter on a futex.
/// (Under loom the lock parks on a modelled futex instead.)
#[cfg(not(loom))]
#[inline]
pub(crate) fn yield_thread() {
    // SAFETY: sched_yield has no preconditions and touches no memory of ours.
    unsafe {
        libc::sched_yield();
    }
}
