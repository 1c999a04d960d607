//! Data structures with no allocation policy: a spin lock, the transfer ring of batches and the
//! remote-free inbox. They store object chains through the first word of each free object and
//! never allocate; each is valid when its memory is all zeroes (metadata pages come from `mmap`)
//! once its `init` (where it has one) has run.

pub mod inbox;
pub mod ring;
pub mod spinlock;

/// What a free object's link word holds is its link XOR this key. A pointer a program writes
/// into a freed block (a dangling `next` field, a zeroed struct: the usual writes after free)
/// then decodes to an address with its top bits set and its low bits odd, which no check of a
/// link lets through, instead of to a block some other owner holds. Sign-extended from 32
/// bits, so the XOR is one instruction with an immediate (glibc's "safe-linking" protects its
/// caches the same way, with the link's own address as the key). Secure mode encodes with a
/// secret instead (`Arena::write_link`).
pub const LINK_KEY: usize = 0xFFFF_FFFF_8000_0007;

/// The offset of a free object's second word, where the C face keeps its double-free mark
/// (the first word is the link): the thread heap's `Screen` tests, writes and clears it, and a
/// bag's carve writes it (`node::CARVE_MARK`).
pub const SCREEN_WORD: usize = 8;

/// The word a free object's first bytes hold for a link to `next`.
#[inline(always)]
pub fn stored_link(next: *mut u8) -> usize {
    next as usize ^ LINK_KEY
}

/// The link a free object's first word that holds `stored` leads to.
#[inline(always)]
pub fn link_of(stored: usize) -> *mut u8 {
    (stored ^ LINK_KEY) as *mut u8
}

/// Reads the link stored in the first bytes of a free object.
///
/// # Safety
/// `object` must point to at least 8 readable bytes, aligned to 8, that nobody writes concurrently.
#[inline(always)]
pub unsafe fn next_of(object: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `object` is a free object we own, aligned and large enough.
    link_of(unsafe { *(object as *const usize) })
}

/// Writes the link word of a free object.
///
/// # Safety
/// As for [`next_of`], and the object must be writable.
#[inline(always)]
pub unsafe fn set_next(object: *mut u8, next: *mut u8) {
    // SAFETY: the caller guarantees `object` is a free object we own, aligned and large enough.
    unsafe { *(object as *mut usize) = stored_link(next) }
}
