//! `memcpy`, `memmove` and `memset`, checked (snmalloc's guarded `memcpy`), with bounds from
//! the page map, before a byte is written:
//!
//! - **Bounded** (`NODALLOC_CHECK_COPIES=1`, outside secure mode): a write whose destination
//!   starts in an object of a size class must end within the object's usable bytes
//!   (`raw::copy_overrun`); otherwise the process aborts naming the object. A range test for a
//!   destination outside the heap (11 instructions), about 30 for one inside. Off by default:
//!   sqlite3 runs 6 % more instructions with it (docs/JOURNAL.md, "Bounded copies").
//! - **Secure mode:** the write must also end within the bytes the program asked for (the
//!   block's trailer), land in a block the program holds and not in a freed one, large blocks
//!   included ([`crate::secure::check_write`]).
//!
//! The library exports the three symbols in every mode, so that neither needs another library.
//! Each is one indirect jump through a word, set when the library loads and finds the next
//! library's function with `dlsym(RTLD_NEXT, …)`: to that function (one instruction more per
//! call), or to the bounded form; the checked form replaces either once the C face has decided
//! it runs in secure mode ([`check_copies`]). Until the word is set (copies of constructors that
//! run before the library's) it holds the early form, which calls glibc's `__*_chk` entry with
//! an unbounded size; that calls glibc's implementation directly, never back through the
//! symbol.
//!
//! The library's own writes into blocks (a bag zeroed, a freed block filled, `realloc`'s copy,
//! canaries) never come here: they use `raw::fill_unchecked` and `raw::copy_unchecked`.
//!
//! Not checked: destinations outside the heap (the stack, globals, mappings of the program's
//! own); when bounded, large blocks (the guard page behind a large block catches a linear
//! overflow) and free objects; in secure mode, destinations deeper than 2 MiB into a large
//! block; sources (reads).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use nodalloc_core::raw;

type CopyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;
type SetFn = unsafe extern "C" fn(*mut c_void, c_int, usize) -> *mut c_void;

/// Where each symbol jumps (a function of the symbol's type: the early form until the library
/// has loaded, see the module's doc), and the next library's function (0: not yet known),
/// which the bounded and checked forms call.
static MEMCPY: AtomicPtr<()> = AtomicPtr::new(memcpy_early as CopyFn as *mut ());
static MEMMOVE: AtomicPtr<()> = AtomicPtr::new(memmove_early as CopyFn as *mut ());
static MEMSET: AtomicPtr<()> = AtomicPtr::new(memset_early as SetFn as *mut ());
static NEXT_MEMCPY: AtomicUsize = AtomicUsize::new(0);
static NEXT_MEMMOVE: AtomicUsize = AtomicUsize::new(0);
static NEXT_MEMSET: AtomicUsize = AtomicUsize::new(0);

/// Finds the next library's functions (at the library's load) and points each symbol at it,
/// or at its bounded form under `NODALLOC_CHECK_COPIES=1`. A symbol already turned to its
/// checked form keeps it.
pub(crate) fn resolve() {
    for (name, next) in [
        (c"memcpy", &NEXT_MEMCPY),
        (c"memmove", &NEXT_MEMMOVE),
        (c"memset", &NEXT_MEMSET),
    ] {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other precondition.
        let address = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if address != 0 {
            next.store(address, Ordering::Release);
        }
    }
    let bound = raw::copy_checks_requested();
    for (next, target, early, bounded) in [
        (
            &NEXT_MEMCPY,
            &MEMCPY,
            memcpy_early as CopyFn as *mut (),
            memcpy_bounded as CopyFn as *mut (),
        ),
        (
            &NEXT_MEMMOVE,
            &MEMMOVE,
            memmove_early as CopyFn as *mut (),
            memmove_bounded as CopyFn as *mut (),
        ),
        (
            &NEXT_MEMSET,
            &MEMSET,
            memset_early as SetFn as *mut (),
            memset_bounded as SetFn as *mut (),
        ),
    ] {
        let address = next.load(Ordering::Acquire);
        if address != 0 {
            let to = if bound { bounded } else { address as *mut () };
            let _ = target.compare_exchange(early, to, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// Turns the checks on (secure mode decided).
pub(crate) fn check_copies() {
    MEMCPY.store(memcpy_checked as CopyFn as *mut (), Ordering::Release);
    MEMMOVE.store(memmove_checked as CopyFn as *mut (), Ordering::Release);
    MEMSET.store(memset_checked as SetFn as *mut (), Ordering::Release);
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
    let target = MEMCPY.load(Ordering::Relaxed);
    // SAFETY: the word always holds a function of `memcpy`'s type (its initial value,
    // `resolve`, `check_copies`); C's `memcpy` contract, forwarded.
    unsafe { core::mem::transmute::<*mut (), CopyFn>(target)(dst, src, n) }
}

/// # Safety
/// C's `memmove`.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    let target = MEMMOVE.load(Ordering::Relaxed);
    // SAFETY: as in `memcpy`, for `memmove`'s type and contract.
    unsafe { core::mem::transmute::<*mut (), CopyFn>(target)(dst, src, n) }
}

/// # Safety
/// C's `memset`.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut c_void, byte: c_int, n: usize) -> *mut c_void {
    let target = MEMSET.load(Ordering::Relaxed);
    // SAFETY: as in `memcpy`, for `memset`'s type and contract.
    unsafe { core::mem::transmute::<*mut (), SetFn>(target)(dst, byte, n) }
}

// The early forms: the symbols' targets until the library has found the next library's
// functions (see the module's doc).

unsafe extern "C" fn memcpy_early(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    // SAFETY: C's `memcpy` contract, forwarded.
    unsafe { __memcpy_chk(dst, src, n, unbounded()) }
}

unsafe extern "C" fn memmove_early(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    // SAFETY: C's `memmove` contract, forwarded.
    unsafe { __memmove_chk(dst, src, n, unbounded()) }
}

unsafe extern "C" fn memset_early(dst: *mut c_void, byte: c_int, n: usize) -> *mut c_void {
    // SAFETY: C's `memset` contract, forwarded.
    unsafe { __memset_chk(dst, byte, n, unbounded()) }
}

// The bounded forms (`NODALLOC_CHECK_COPIES=1`): the bound, then the next library's function, which
// `resolve` found before it pointed a symbol here.

/// Aborts naming the object at `start`, which a copy runs out of. It returns a pointer for
/// the bounded forms to tail-call it (no stack frame of theirs to align), and never returns.
#[cold]
#[inline(never)]
extern "C" fn overrun(start: *mut u8) -> *mut c_void {
    raw::report_corruption("heap overflow: a copy runs past the end of block", start)
}

unsafe extern "C" fn memcpy_bounded(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    if let Some(start) = raw::copy_overrun(dst as *const u8, n) {
        return overrun(start);
    }
    let next = NEXT_MEMCPY.load(Ordering::Relaxed);
    // SAFETY: C's `memcpy` contract, forwarded; `resolve` set `NEXT_MEMCPY` (glibc's
    // `memcpy`) before it pointed the symbol here.
    unsafe { core::mem::transmute::<usize, CopyFn>(next)(dst, src, n) }
}

unsafe extern "C" fn memmove_bounded(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> *mut c_void {
    if let Some(start) = raw::copy_overrun(dst as *const u8, n) {
        return overrun(start);
    }
    let next = NEXT_MEMMOVE.load(Ordering::Relaxed);
    // SAFETY: as in `memcpy_bounded`, for `memmove`.
    unsafe { core::mem::transmute::<usize, CopyFn>(next)(dst, src, n) }
}

unsafe extern "C" fn memset_bounded(dst: *mut c_void, byte: c_int, n: usize) -> *mut c_void {
    if let Some(start) = raw::copy_overrun(dst as *const u8, n) {
        return overrun(start);
    }
    let next = NEXT_MEMSET.load(Ordering::Relaxed);
    // SAFETY: as in `memcpy_bounded`, for `memset`.
    unsafe { core::mem::transmute::<usize, SetFn>(next)(dst, byte, n) }
}

// The checked forms (secure mode): the check, then the next library's function.

unsafe extern "C" fn memcpy_checked(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    crate::secure::check_write(dst as *mut u8, n);
    match NEXT_MEMCPY.load(Ordering::Acquire) {
        // SAFETY: C's `memcpy` contract, forwarded; the destination checked.
        0 => unsafe { __memcpy_chk(dst, src, n, unbounded()) },
        // SAFETY: as above, through glibc's `memcpy` (`resolve`).
        next => unsafe { core::mem::transmute::<usize, CopyFn>(next)(dst, src, n) },
    }
}

unsafe extern "C" fn memmove_checked(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> *mut c_void {
    crate::secure::check_write(dst as *mut u8, n);
    match NEXT_MEMMOVE.load(Ordering::Acquire) {
        // SAFETY: C's `memmove` contract, forwarded; the destination checked.
        0 => unsafe { __memmove_chk(dst, src, n, unbounded()) },
        // SAFETY: as above, through glibc's `memmove` (`resolve`).
        next => unsafe { core::mem::transmute::<usize, CopyFn>(next)(dst, src, n) },
    }
}

unsafe extern "C" fn memset_checked(dst: *mut c_void, byte: c_int, n: usize) -> *mut c_void {
    crate::secure::check_write(dst as *mut u8, n);
    match NEXT_MEMSET.load(Ordering::Acquire) {
        // SAFETY: C's `memset` contract, forwarded; the destination checked.
        0 => unsafe { __memset_chk(dst, byte, n, unbounded()) },
        // SAFETY: as above, through glibc's `memset` (`resolve`).
        next => unsafe { core::mem::transmute::<usize, SetFn>(next)(dst, byte, n) },
    }
}
