//! Secure mode's trailer and canary: the last 8 bytes of a block's usable space hold the size
//! the program asked for and how it allocated the block, with a check field, mixed with the
//! block's address and the process's secret; canary bytes fill the gap before it.

use super::Kind;
use nodalloc_core::raw;

/// The trailer's bytes, at the end of each block's usable space.
pub(super) const TRAILER: usize = 8;
/// Bytes a block takes beyond the program's: its trailer and at least one canary byte, so the
/// byte just past the program's is never the trailer's, whose keyed bytes are random (a one-byte
/// overflow that wrote the value already there, 1 in 256, went unseen); the canary's top bit is
/// set, so a one-byte overflow of text or a NUL terminator always shows.
pub(crate) const OVERHEAD: usize = TRAILER + 1;
/// Canary bytes written (and checked) after the program's bytes, at most.
pub(super) const CANARY_BYTES: usize = 64;
/// The key that mixes the trailer of the block at `p`.
fn key(p: *const u8) -> u64 {
    raw::mix(p as u64 ^ raw::process_secret())
}

/// The canary byte of the block at `p` (never zero: a zeroing overflow must show).
pub(super) fn canary(p: *const u8) -> u8 {
    (key(p) >> 56) as u8 | 0x80
}

const SIZE_BITS: u32 = 40;
const BODY_BITS: u32 = 48;

/// The trailer of the block at `p` holding `size` bytes of `kind`.
fn encode(p: *const u8, size: usize, kind: Kind) -> u64 {
    let key = key(p);
    let body = (size as u64 & ((1 << SIZE_BITS) - 1)) | (kind as u64) << SIZE_BITS;
    let check = raw::mix(body ^ key) >> BODY_BITS;
    (body | check << BODY_BITS) ^ key
}

/// The size and kind a trailer holds, if it is the intact trailer of the block at `p`.
pub(super) fn decode(p: *const u8, word: u64) -> Option<(usize, Kind)> {
    let key = key(p);
    let raw = word ^ key;
    let body = raw & ((1 << BODY_BITS) - 1);
    if raw >> BODY_BITS != raw::mix(body ^ key) >> BODY_BITS {
        return None;
    }
    let kind = Kind::from_bits(body >> SIZE_BITS)?;
    Some(((body & ((1 << SIZE_BITS) - 1)) as usize, kind))
}

/// Reads the trailer of the block at `p` of `usable` bytes.
///
/// # Safety
/// `p` is a block of the heap of at least `usable` (>= 8) readable bytes.
pub(super) unsafe fn trailer(p: *const u8, usable: usize) -> Option<(usize, Kind)> {
    // SAFETY: the last 8 bytes of the block (contract above).
    let word = unsafe { (p.add(usable - TRAILER) as *const u64).read_unaligned() };
    decode(p, word)
}

/// # Safety
/// As for [`trailer`], and the caller owns the block.
pub(super) unsafe fn set_trailer(p: *mut u8, usable: usize, size: usize, kind: Kind) {
    // SAFETY: contract above.
    unsafe { (p.add(usable - TRAILER) as *mut u64).write_unaligned(encode(p, size, kind)) };
}

/// True when `len` bytes at `p` are all zero.
///
/// # Safety
/// `p..p + len` is readable.
pub(super) unsafe fn all_zero(p: *const u8, len: usize) -> bool {
    let mut offset = 0;
    while offset + 8 <= len {
        // SAFETY: in bounds (contract above).
        if unsafe { (p.add(offset) as *const u64).read_unaligned() } != 0 {
            return false;
        }
        offset += 8;
    }
    // SAFETY: as above.
    (offset..len).all(|i| unsafe { *p.add(i) } == 0)
}
