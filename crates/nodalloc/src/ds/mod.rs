//! Data structures with no allocation policy: a spin lock, the transfer ring of batches and the
//! remote-free inbox. They store object chains through the first word of each free object and
//! never allocate; each is valid when its memory is all zeroes (metadata pages come from `mmap`)
//! once its `init` (where it has one) has run.

pub mod inbox;
pub mod ring;
pub mod spinlock;

/// Reads the link word stored in the first bytes of a free object.
///
/// # Safety
/// `object` must point to at least 8 readable bytes, aligned to 8, that nobody writes concurrently.
#[inline(always)]
pub unsafe fn next_of(object: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `object` is a free object we own, aligned and large enough.
    unsafe { *(object as *mut *mut u8) }
}

/// Writes the link word of a free object.
///
/// # Safety
/// As for [`next_of`], and the object must be writable.
#[inline(always)]
pub unsafe fn set_next(object: *mut u8, next: *mut u8) {
    // SAFETY: the caller guarantees `object` is a free object we own, aligned and large enough.
    unsafe { *(object as *mut *mut u8) = next }
}
