//! `memcpy`, `memmove` and `memset`, checked in secure mode (snmalloc's guarded `memcpy`): a
//! write whose destination starts in a heap block must end within the bytes the program asked
//! for, land in a block the program holds, and not in a freed one; otherwise the process aborts
//! naming the block, before a byte is written. The bounds come from the page map (the block
//! holding the destination) and the block's trailer (the size asked for).
//!
//! The library exports the three symbols in every mode, so that secure mode needs no other
//! library; outside secure mode each is one load and one branch in front of glibc's own
//! implementation, reached through its `__*_chk` entry with an unbounded size (glibc's checked
//! entries call its implementation directly, never back through the symbol). The check turns
//! on once the C face has decided it runs in secure mode ([`check_copies`]); copies before that
//! (the dynamic loader's, constructors') are not checked.
//!
//! The library's own writes into blocks (a bag zeroed, a freed block filled, `realloc`'s copy,
//! canaries) never come here: they use `raw::fill_unchecked` and `raw::copy_unchecked`.
//!
//! Not checked: destinations outside the heap (the stack, globals, mappings of the program's
//! own), deeper than 2 MiB into a large block (the guard page behind it catches a linear
//! overflow there), and sources (reads).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};

/// Set once secure mode is on (never cleared).
static CHECKED: AtomicBool = AtomicBool::new(false);

/// Turns the checks on (secure mode decided).
pub(crate) fn check_copies() {
    CHECKED.store(true, Ordering::Relaxed);
}

extern "C" {
    fn __memcpy_chk(dst: *mut c_void, src: *const c_void, n: usize, room: usize) -> *mut c_void;
    fn __memmove_chk(dst: *mut c_void, src: *const c_void, n: usize, room: usize) -> *mut c_void;
    fn __memset_chk(dst: *mut c_void, byte: c_int, n: usize, room: usize) -> *mut c_void;
}

/// The room the `__*_chk` entries are told of: unbounded, read from memory so that the
/// optimiser cannot see it (a call with a room it knows to be unbounded it turns back into a
/// call of the plain symbol: this one).
static UNBOUNDED: usize = usize::MAX;

#[inline(always)]
fn unbounded() -> usize {
    // SAFETY: a static, always readable.
    unsafe { core::ptr::read_volatile(&UNBOUNDED) }
}

/// # Safety
/// C's `memcpy`.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    if CHECKED.load(Ordering::Relaxed) {
        // SAFETY: forwarded contract.
        return unsafe { memcpy_checked(dst, src, n) };
    }
    // SAFETY: C's `memcpy` contract, forwarded.
    unsafe { __memcpy_chk(dst, src, n, unbounded()) }
}

/// # Safety
/// C's `memmove`.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    if CHECKED.load(Ordering::Relaxed) {
        // SAFETY: forwarded contract.
        return unsafe { memmove_checked(dst, src, n) };
    }
    // SAFETY: C's `memmove` contract, forwarded.
    unsafe { __memmove_chk(dst, src, n, unbounded()) }
}

/// # Safety
/// C's `memset`.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut c_void, byte: c_int, n: usize) -> *mut c_void {
    if CHECKED.load(Ordering::Relaxed) {
        // SAFETY: forwarded contract.
        return unsafe { memset_checked(dst, byte, n) };
    }
    // SAFETY: C's `memset` contract, forwarded.
    unsafe { __memset_chk(dst, byte, n, unbounded()) }
}

// The checked forms, out of line: the plain ones keep no frame.

#[cold]
#[inline(never)]
unsafe fn memcpy_checked(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    crate::secure::check_write(dst as *mut u8, n);
    // SAFETY: C's `memcpy` contract, forwarded; the destination checked.
    unsafe { __memcpy_chk(dst, src, n, unbounded()) }
}

#[cold]
#[inline(never)]
unsafe fn memmove_checked(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    crate::secure::check_write(dst as *mut u8, n);
    // SAFETY: C's `memmove` contract, forwarded; the destination checked.
    unsafe { __memmove_chk(dst, src, n, unbounded()) }
}

#[cold]
#[inline(never)]
unsafe fn memset_checked(dst: *mut c_void, byte: c_int, n: usize) -> *mut c_void {
    crate::secure::check_write(dst as *mut u8, n);
    // SAFETY: C's `memset` contract, forwarded; the destination checked.
    unsafe { __memset_chk(dst, byte, n, unbounded()) }
}
