//! Fill patterns and their verification, used by every Rust workload
//! ([`crate::workloads`]) on every object it allocates, and by the tests.
//!
//! An object is filled with 64-bit words derived from a *tag*, itself derived
//! from the object's address and index ([`tag_for`]). Because neighbouring
//! objects get different tags, the check catches an allocator that hands out
//! overlapping blocks, writes its metadata into a live block, or loses data in
//! `realloc`, not just stray writes.
//!
//! Objects up to [`FULL_FILL_LIMIT`] bytes are filled completely. Larger ones
//! get their first and last [`EDGE`] bytes (where headers and footers of
//! neighbours would land) plus one word every 4 KiB: touching every page keeps
//! first-touch page faults in the measurement (an allocator that returns fresh
//! `mmap`s cannot hide that cost), while not turning a 4 MiB alloc/free
//! benchmark into a `memset` benchmark.

use crate::prng::splitmix64;
use std::fmt;

/// Objects up to this size are filled and verified byte for byte.
pub const FULL_FILL_LIMIT: usize = 1024;
/// Bytes at each end of a large object that are filled completely, where an
/// allocator's headers or footers would sit.
pub const EDGE: usize = 256;
/// Stride of the sampled words in the middle of a large object.
pub const PAGE: usize = 4096;

// The large-object layout below relies on head and tail not overlapping.
const _: () = assert!(FULL_FILL_LIMIT >= 2 * EDGE);

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The tag of the object with sequence number `index` living at `ptr`.
#[inline(always)]
pub fn tag_for(ptr: *const u8, index: u64) -> u64 {
    splitmix64(ptr as usize as u64 ^ index.wrapping_mul(GOLDEN))
}

/// The word expected at byte `offset` (a multiple of 8) of an object tagged
/// `tag`. Depends on the offset so that a block copied to the wrong place, or
/// shifted, is detected too.
#[inline(always)]
pub fn word_value(tag: u64, offset: usize) -> u64 {
    tag ^ (offset as u64).wrapping_mul(GOLDEN)
}

/// The byte expected at `offset`: the matching byte of the little-endian word
/// that covers it, so word and byte views of one object agree.
#[inline(always)]
pub fn byte_value(tag: u64, offset: usize) -> u8 {
    (word_value(tag, offset & !7) >> ((offset & 7) * 8)) as u8
}

#[derive(Clone, Copy)]
enum Probe {
    Word(usize),
    Byte(usize),
}

/// Calls `f` for every location of a `size`-byte object that the pattern
/// covers; stops early when `f` returns false. Words are 8-aligned offsets,
/// bytes are the tail that does not fill a whole word.
#[inline(always)]
fn for_each_probe(size: usize, mut f: impl FnMut(Probe) -> bool) {
    let words_end = size & !7;
    if size <= FULL_FILL_LIMIT {
        let mut o = 0;
        while o < words_end {
            if !f(Probe::Word(o)) {
                return;
            }
            o += 8;
        }
    } else {
        // size > FULL_FILL_LIMIT >= 2 * EDGE, so head, sampled middle and
        // tail are disjoint and in order. Probes are at most PAGE apart, so
        // every page the object spans is written.
        let tail_start = (size - EDGE) & !7;
        let mut o = 0;
        while o < EDGE {
            if !f(Probe::Word(o)) {
                return;
            }
            o += 8;
        }
        o = PAGE;
        while o < tail_start {
            if !f(Probe::Word(o)) {
                return;
            }
            o += PAGE;
        }
        o = tail_start;
        while o < words_end {
            if !f(Probe::Word(o)) {
                return;
            }
            o += 8;
        }
    }
    for b in words_end..size {
        if !f(Probe::Byte(b)) {
            return;
        }
    }
}

/// Writes the pattern of `tag` into the `size`-byte object at `ptr`.
///
/// # Safety
/// `ptr` must be valid for writes of `size` bytes and 8-byte aligned.
#[inline(always)]
pub unsafe fn fill(ptr: *mut u8, size: usize, tag: u64) {
    for_each_probe(size, |p| {
        match p {
            // SAFETY: the probe offsets stay inside `size` and word offsets are
            // multiples of 8 from an 8-aligned base, per the caller's contract.
            Probe::Word(o) => unsafe { ptr.add(o).cast::<u64>().write(word_value(tag, o)) },
            // SAFETY: `o < size`, inside the object.
            Probe::Byte(o) => unsafe { ptr.add(o).write(byte_value(tag, o)) },
        }
        true
    });
}

/// A mismatch found by [`verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    pub ptr: usize,
    pub size: usize,
    pub offset: usize,
    pub expected: u64,
    pub found: u64,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "object {:#x} ({} B) corrupted at offset {}: expected {:#x}, found {:#x}",
            self.ptr, self.size, self.offset, self.expected, self.found
        )
    }
}

/// Checks that the object still holds the pattern written by [`fill`] with the
/// same `tag`, reporting the first location that differs.
///
/// # Safety
/// `ptr` must be valid for reads of `size` bytes and 8-byte aligned.
#[inline(always)]
pub unsafe fn verify(ptr: *const u8, size: usize, tag: u64) -> Result<(), Corruption> {
    let mut bad = None;
    for_each_probe(size, |p| {
        let (offset, expected, found) = match p {
            // SAFETY: in bounds and aligned, as in `fill`.
            Probe::Word(o) => (o, word_value(tag, o), unsafe {
                ptr.add(o).cast::<u64>().read()
            }),
            // SAFETY: `o < size`, inside the object.
            Probe::Byte(o) => (o, byte_value(tag, o) as u64, unsafe {
                ptr.add(o).read() as u64
            }),
        };
        if expected != found {
            bad = Some(Corruption {
                ptr: ptr as usize,
                size,
                offset,
                expected,
                found,
            });
            return false;
        }
        true
    });
    match bad {
        None => Ok(()),
        Some(c) => Err(c),
    }
}

/// [`verify`], panicking with `who` (the allocator) and the corruption.
///
/// # Safety
/// As for [`verify`].
#[inline(always)]
pub unsafe fn verify_or_panic(ptr: *const u8, size: usize, tag: u64, who: &str) {
    // SAFETY: forwarded caller contract.
    if let Err(c) = unsafe { verify(ptr, size, tag) } {
        corruption_panic(who, c);
    }
}

#[cold]
#[inline(never)]
fn corruption_panic(who: &str, c: Corruption) -> ! {
    panic!("{who}: {c}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_buffer(size: usize, f: impl FnOnce(*mut u8)) {
        let mut v = vec![0u64; size.div_ceil(8)];
        f(v.as_mut_ptr().cast());
    }

    #[test]
    fn roundtrip_all_shapes() {
        for size in [1, 7, 8, 9, 63, 64, 520, 4095, 4096, 4097, 10_000, 65_536] {
            // SAFETY: `with_buffer` passes an 8-aligned buffer of at least
            // `size` bytes that outlives the closure.
            with_buffer(size, |p| unsafe {
                let tag = tag_for(p, 3);
                fill(p, size, tag);
                verify(p, size, tag).unwrap();
                // A different index (another object) must not match, wherever the two
                // patterns differ at all: a 1-byte object's two tags share their byte one time
                // in 256, depending on the buffer's address.
                let other = tag_for(p, 4);
                if (0..size).any(|i| byte_value(other, i) != byte_value(tag, i)) {
                    assert!(verify(p, size, other).is_err());
                }
            });
        }
    }

    #[test]
    fn detects_corruption_in_head_page_and_tail() {
        let size = 3 * PAGE + 13;
        for offset in [0, 5, PAGE, 2 * PAGE + 3, size - 1, size - 20] {
            // SAFETY: as above; `offset < size`.
            with_buffer(size, |p| unsafe {
                let tag = tag_for(p, 0);
                fill(p, size, tag);
                *p.add(offset) ^= 0x40;
                let c = verify(p, size, tag).expect_err("corruption not detected");
                let reported = if offset >= size & !7 {
                    offset
                } else {
                    offset & !7
                };
                assert_eq!(c.offset, reported);
            });
        }
    }
}
