//! The futex pair the lock parks on (`ds/spinlock.rs`): private futexes on a 32-bit word.

use super::errno;
use core::sync::atomic::AtomicU32;

/// Sleeps while `word` holds `expected`, until a [`futex_wake`] on it (or a signal, or a
/// spurious wake-up: the caller re-checks its condition). Returns at once if `word` no longer
/// holds `expected`. False when the kernel refused the call itself (a sandbox that forbids
/// `futex`), so the caller knows it did not wait.
pub fn futex_wait(word: &AtomicU32, expected: u32) -> bool {
    // SAFETY: FUTEX_WAIT reads the aligned 32-bit word we borrow and sleeps on its address; no
    // timeout pointer is passed, and no memory of ours is written.
    let result = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        )
    };
    result == 0 || matches!(errno(), libc::EAGAIN | libc::EINTR)
}

/// Wakes at most `count` threads sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &AtomicU32, count: i32) {
    // SAFETY: FUTEX_WAKE only looks up sleepers on the address of the word we borrow.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        )
    };
}
