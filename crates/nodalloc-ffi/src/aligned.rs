//! The aligned entry points: `posix_memalign`, `aligned_alloc`, `memalign`, `valloc` and
//! `pvalloc`, each with glibc's checks of its alignment. A valid power-of-two alignment first
//! tries the thread's cache (`pop_aligned`: `malloc`'s fast path at 16 or less, the list of the
//! class whose objects are aligned above) before the call-site stub; on a miss
//! [`allocate_aligned`] serves them (and C++'s aligned `new`).

use crate::callsite::entry_stub;
use crate::plain::{allocate_at, malloc_at, set_errno, MALLOC_ALIGN};
use crate::{pop_aligned, pop_small, secure};
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

const PAGE: usize = 4096;

/// An aligned allocation from `site`; `align` must already be a valid power of two.
pub(crate) fn allocate_aligned(
    align: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if secure::on() {
        return secure::alloc(size, align, secure::Kind::Malloc, site, frame);
    }
    if align <= MALLOC_ALIGN {
        return malloc_at(size, site, frame);
    }
    allocate_at(size, align, site, frame)
}

/// # Safety
/// POSIX `posix_memalign`: `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // The valid alignments: powers of two, multiples of a pointer.
    if align.is_power_of_two() && align >= core::mem::size_of::<*mut c_void>() {
        let p = pop_aligned(align, size);
        if !p.is_null() {
            // SAFETY: the caller's contract: `out` is writable.
            unsafe { *out = p as *mut c_void };
            return 0;
        }
    }
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_posix_memalign_entry(out, align, size) }
}

entry_stub!(fn nodalloc_posix_memalign_entry(out: *mut *mut c_void, align: usize, size: usize)
    -> c_int => posix_memalign_at, site: "rcx", frame: "r8");

/// # Safety
/// `posix_memalign`, called from `site`.
pub(crate) unsafe extern "C" fn posix_memalign_at(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> c_int {
    if !align.is_power_of_two() || align % core::mem::size_of::<*mut c_void>() != 0 {
        return libc::EINVAL;
    }
    let saved = errno();
    let p = allocate_aligned(align, size, site, frame);
    if p.is_null() {
        set_errno(saved);
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer.
    unsafe { *out = p };
    0
}

fn errno() -> c_int {
    // SAFETY: as in `set_errno`.
    unsafe { *libc::__errno_location() }
}

/// # Safety
/// C11 `aligned_alloc` (glibc: any power-of-two alignment, any size).
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if align.is_power_of_two() {
        let p = pop_aligned(align, size);
        if !p.is_null() {
            return p as *mut c_void;
        }
    }
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_aligned_alloc_entry(align, size) }
}

entry_stub!(fn nodalloc_aligned_alloc_entry(align: usize, size: usize) -> *mut c_void
    => aligned_alloc_at, site: "rdx", frame: "rcx");

pub(crate) extern "C" fn aligned_alloc_at(
    align: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    allocate_aligned(align, size, site, frame)
}

/// # Safety
/// glibc's `memalign`: a non-power-of-two alignment is rounded up to one.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // Up to 16 (rounded up to a power of two as below), which `malloc` meets; above, the
    // powers of two.
    let p = if align <= MALLOC_ALIGN {
        pop_small(size)
    } else if align.is_power_of_two() {
        pop_aligned(align, size)
    } else {
        null_mut()
    };
    if !p.is_null() {
        return p as *mut c_void;
    }
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_memalign_entry(align, size) }
}

entry_stub!(fn nodalloc_memalign_entry(align: usize, size: usize) -> *mut c_void
    => memalign_at, site: "rdx", frame: "rcx");

pub(crate) extern "C" fn memalign_at(
    align: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    // glibc: alignments above SIZE_MAX / 2 + 1 are invalid; up to it they round to a power of
    // two (and a request that cannot be met is then ENOMEM, not EINVAL).
    let Some(align) = align.max(1).checked_next_power_of_two() else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    allocate_aligned(align, size, site, frame)
}

/// # Safety
/// glibc's `valloc`.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_valloc_entry(size) }
}

entry_stub!(fn nodalloc_valloc_entry(size: usize) -> *mut c_void
    => valloc_at, site: "rsi", frame: "rdx");

pub(crate) extern "C" fn valloc_at(size: usize, site: usize, frame: usize) -> *mut c_void {
    allocate_aligned(PAGE, size, site, frame)
}

/// # Safety
/// glibc's `pvalloc`: page aligned, size rounded up to whole pages.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_pvalloc_entry(size) }
}

entry_stub!(fn nodalloc_pvalloc_entry(size: usize) -> *mut c_void
    => pvalloc_at, site: "rsi", frame: "rdx");

pub(crate) extern "C" fn pvalloc_at(size: usize, site: usize, frame: usize) -> *mut c_void {
    let Some(rounded) = size.max(1).checked_next_multiple_of(PAGE) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    allocate_aligned(PAGE, rounded, site, frame)
}
