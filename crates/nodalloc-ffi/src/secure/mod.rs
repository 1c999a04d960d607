//! Secure mode's layer of the C face (`NODALLOC_SECURE=1`), on top of the core's (encoded and
//! checked links, the allocation bitmap, random carving, guard pages after large blocks):
//!
//! - **Trailer and canary.** The last 8 bytes of every block's usable space hold its
//!   *trailer*: the size the program asked for and how it allocated the block (`malloc`, `new`,
//!   `new[]`, or freed), with a check field, all mixed with the block's address and a secret of
//!   the process. One to [`CANARY_BYTES`] bytes between the program's bytes and the trailer
//!   hold a canary. `free` checks both, so an overflow of even one byte is caught at the
//!   block's free; it checks the trailer of the object just before in the bag when the program
//!   holds that one (an underflow damages it); it checks the kind (`delete` of a `malloc`
//!   block, `delete[]` of a `new` block, `free` of either) and a sized `delete`'s size.
//! - **Fill and quarantine.** A freed block of a size class is zeroed and its trailer says
//!   "freed"; a freed large block (whole pages) is made inaccessible. It then waits in the thread's quarantine (at most
//!   [`QUARANTINE_SLOTS`] blocks and [`QUARANTINE_BYTES`] bytes) before the core takes it back,
//!   so its address is not handed out again at once. The zeros are checked when the block
//!   leaves the quarantine, when it is handed out again, at the thread's next call after its
//!   free, and as every 8th free checks one other block of the quarantine in turn: a write
//!   after free is caught.
//! - **Zero-size blocks.** `malloc(0)` returns a distinct address in a reserved inaccessible
//!   area: any read or write through it faults.
//!
//! The fast paths never come here: in secure mode the core keeps them empty, and every entry
//! point's slow path asks [`on`] first. Nothing here allocates: the quarantine lives in a page
//! mapped for each thread, the zero-size area in one reservation.
//!
//! The layer wraps the plain path (`plain.rs`) and never calls the entry file: this file holds
//! the entries' secure versions (allocation, free, `realloc`, usable size), `trailer.rs` the
//! trailer and canary codec, `quarantine.rs` the quarantine, `zero.rs` the zero-size area.

mod quarantine;
mod trailer;
mod zero;

pub(crate) use quarantine::flush_thread;
pub(crate) use trailer::OVERHEAD;

use crate::{foreign, plain};
use core::ffi::c_void;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU8, Ordering};
use nodalloc_core::raw::{self, PointerMisuse};
use quarantine::{
    check_recent, in_quarantine, quarantine, report_write_after_free, QUARANTINE_BYTES,
};
use trailer::{all_zero, canary, decode, set_trailer, trailer, CANARY_BYTES, TRAILER};
use zero::{is_zero_block, zero_block, ZERO_STEP};

/// Added to a large block's usable bytes (always a multiple of a page) to tell it apart:
/// [`core_usable`] and the quarantine's records carry it.
const LARGE: usize = 1;

/// The usable bytes of a block as [`core_usable`] gives them, and whether it is large.
pub(super) fn split(tagged: usize) -> (usize, bool) {
    (tagged & !LARGE, tagged & LARGE != 0)
}

/// How the program allocated a block, as its trailer records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Malloc = 1,
    New = 2,
    NewArray = 3,
    /// Freed, waiting in the quarantine (or freed and taken back since).
    Freed = 15,
}

impl Kind {
    pub(super) fn from_bits(bits: u64) -> Option<Kind> {
        match bits {
            1 => Some(Kind::Malloc),
            2 => Some(Kind::New),
            3 => Some(Kind::NewArray),
            15 => Some(Kind::Freed),
            _ => None,
        }
    }
}

/// 0: not decided yet; 1: off; 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// True in secure mode. Decided from the environment at the first call (before the allocator
/// starts, so every block of the process has a trailer).
#[inline]
pub(crate) fn on() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let secure = raw::secure_requested();
    if secure {
        // A thread's quarantine goes back (checked) before its heap retires.
        plain::run_before_retire(flush_thread);
        crate::copy::check_copies();
    } else {
        // Objects carved into a cache carry the screen's mark until they are handed out.
        raw::mark_carved_objects(crate::screen::FREED_MARK);
    }
    STATE.store(if secure { 2 } else { 1 }, Ordering::Relaxed);
    secure
}

/// The usable bytes the core gave the block at `p` (with [`LARGE`] added for a large object,
/// whole pages), or `None` for a block from before nodalloc started; aborts for a pointer that
/// is no block.
pub(super) fn core_usable(p: *mut u8) -> Option<usize> {
    plain::usable_and_size_kind(p).map(|(bytes, large)| if large { bytes | LARGE } else { bytes })
}

// ---- Allocation ----

/// An allocation of `size` bytes at `align` (a power of two) for `kind`, from `site`.
pub(crate) fn alloc(
    size: usize,
    align: usize,
    kind: Kind,
    site: usize,
    frame: usize,
) -> *mut c_void {
    check_recent(false);
    if size == 0 && align <= ZERO_STEP {
        return zero_block();
    }
    let Some(total) = size.checked_add(OVERHEAD) else {
        plain::set_errno(libc::ENOMEM);
        return null_mut();
    };
    let p = plain::allocate_at(total, align.max(plain::MALLOC_ALIGN), site, frame);
    // SAFETY: a block just handed out, of at least `total` bytes.
    unsafe { finish(p, size, kind) }
}

/// Makes the block the core just handed out (of at least `size + OVERHEAD` bytes, or null) a
/// block of `size` bytes for `kind`: its zeros checked if it was freed before, its canary and
/// trailer written. Returns it.
///
/// # Safety
/// `p` is null or a block of at least `size + OVERHEAD` bytes just handed out, the caller's.
pub(crate) unsafe fn finish(p: *mut c_void, size: usize, kind: Kind) -> *mut c_void {
    let p = p as *mut u8;
    if p.is_null() {
        return null_mut();
    }
    let Some((usable, large)) = core_usable(p).map(split) else {
        return p as *mut c_void;
    };
    // SAFETY: the block is ours, of `usable` bytes.
    unsafe {
        // A large span may have held large blocks of other sizes before: only blocks of a
        // class are checked (a bag's memory is zeroed when it is carved).
        if !large && matches!(trailer(p, usable), Some((_, Kind::Freed))) {
            // Freed by the program before: zero but for the core's link in the first word.
            if !all_zero(p.add(8), usable - TRAILER - 8) {
                report_write_after_free(p);
            }
        }
        // Every block is handed out reading as zero (what a freed block held never reaches the
        // next owner): a block of a class is, but for its first word (a link while it was
        // free); a large span that held other blocks is cleared as far as asked for.
        // (Written without the `memset` symbol, whose check is for the program's writes.)
        if !large {
            raw::fill_unchecked(p, 0, 8);
        } else if !raw::large_is_zeroed(p) {
            raw::fill_unchecked(p, 0, size);
        }
        let canary_end = (size + CANARY_BYTES).min(usable - TRAILER);
        raw::fill_unchecked(p.add(size), canary(p), canary_end - size);
        set_trailer(p, usable, size, kind);
    }
    p as *mut c_void
}

/// `calloc`'s secure form: zeroed `count * size` bytes.
pub(crate) fn calloc(count: usize, size: usize, site: usize, frame: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        plain::set_errno(libc::ENOMEM);
        return null_mut();
    };
    let p = alloc(total, plain::MALLOC_ALIGN, Kind::Malloc, site, frame);
    if !p.is_null() && total != 0 {
        // SAFETY: a fresh block of `total` bytes.
        unsafe { raw::fill_unchecked(p as *mut u8, 0, total) };
    }
    p
}

// ---- Free ----

/// The size of the live block at `p` that the program frees as `expected` (with `sized`, the
/// size a sized `delete` passed), after every check of its trailer, canary and the object
/// before it; `None` for a block from before nodalloc started. Aborts naming `p` on a misuse.
///
/// # Safety
/// `p` is not null and not a zero-size block.
unsafe fn checked(p: *mut u8, expected: Kind, sized: Option<usize>) -> Option<(usize, usize)> {
    let (usable, large) = split(core_usable(p)?);
    if large && in_quarantine(p) {
        // Inaccessible while it waits: its trailer cannot be read.
        raw::report_misuse(p, PointerMisuse::DoubleFree);
    }
    // SAFETY: a block of the heap of `usable` bytes.
    let Some((size, kind)) = (unsafe { trailer(p, usable) }) else {
        raw::report_corruption(
            "heap overflow: the end of the block was overwritten (its trailer is damaged):",
            p,
        );
    };
    if kind == Kind::Freed {
        raw::report_misuse(p, PointerMisuse::DoubleFree);
    }
    if size + TRAILER > usable {
        raw::report_corruption("heap overflow: damaged trailer of block", p);
    }
    let canary_end = (size + CANARY_BYTES).min(usable - TRAILER);
    let canary = canary(p);
    // SAFETY: bytes of the block.
    if (size..canary_end).any(|i| unsafe { *p.add(i) } != canary) {
        raw::report_corruption("heap overflow: bytes past the end of block", p);
    }
    if kind != expected {
        raw::report_corruption(mismatch(kind, expected), p);
    }
    if let Some(sized) = sized {
        if sized != size {
            raw::report_corruption(wrong_size_message(expected), p);
        }
    }
    if let Some(before) = raw::object_before(p) {
        // SAFETY: an object of the same bag, of `usable` bytes. Its last word is a trailer
        // (held by the program, waiting in a quarantine, or freed: the trailer says so), or
        // zero (never carved: secure mode's bags start zeroed), unless something wrote there.
        let word = unsafe { (before.add(usable - TRAILER) as *const u64).read_unaligned() };
        if word != 0 && decode(before, word).is_none() {
            raw::report_corruption(
                "heap underflow: the object before block was overwritten at its end:",
                p,
            );
        }
    }
    Some((size, usable | if large { LARGE } else { 0 }))
}

fn mismatch(kind: Kind, expected: Kind) -> &'static str {
    match (kind, expected) {
        (Kind::Malloc, Kind::New) => "delete of a block from malloc:",
        (Kind::Malloc, Kind::NewArray) => "delete[] of a block from malloc:",
        (Kind::New, Kind::Malloc) => "free of a block from new (use delete):",
        (Kind::New, Kind::NewArray) => "delete[] of a block from new (use delete):",
        (Kind::NewArray, Kind::Malloc) => "free of a block from new[] (use delete[]):",
        (Kind::NewArray, Kind::New) => "delete of a block from new[] (use delete[]):",
        _ => "freed the wrong way: block",
    }
}

/// `free`, `delete` (`expected`: how the program frees) and sized `delete` (`sized`).
///
/// # Safety
/// C's `free`: the caller gives the block up (what is checked is reported, not trusted).
pub(crate) unsafe fn free(ptr: *mut c_void, expected: Kind, sized: Option<usize>) {
    let p = ptr as *mut u8;
    if p.is_null() {
        return;
    }
    if is_zero_block(p) {
        if (p as usize) % ZERO_STEP != 0 {
            raw::report_misuse(p, PointerMisuse::InvalidPointer);
        }
        return;
    }
    check_recent(true);
    // SAFETY: neither null nor a zero-size block.
    let Some((size, tagged)) = (unsafe { checked(p, expected, sized) }) else {
        return foreign::free(p);
    };
    let (usable, large) = split(tagged);
    if large {
        if usable > QUARANTINE_BYTES / 4 {
            // SAFETY: a live block the caller gives up.
            return unsafe { plain::free_core(p) };
        }
        // A large block (whole pages) waits inaccessible: a write after free faults.
        // SAFETY: the block is ours, of `usable` bytes, page aligned (a large object).
        let protected = unsafe {
            set_trailer(p, usable, size, Kind::Freed);
            libc::mprotect(p as *mut c_void, usable, libc::PROT_NONE) == 0
        };
        if !protected {
            // SAFETY: as above.
            return unsafe { plain::free_core(p) };
        }
    } else {
        // SAFETY: as above: zeroed but for the trailer, which says freed.
        unsafe {
            raw::fill_unchecked(p, 0, usable - TRAILER);
            set_trailer(p, usable, size, Kind::Freed);
        }
    }
    // SAFETY: a freed block, ours, of `usable` bytes.
    unsafe { quarantine(p, tagged) };
}

/// `malloc_usable_size`: the size the program asked for (the canary starts there).
pub(crate) fn usable(ptr: *mut c_void) -> usize {
    let p = ptr as *mut u8;
    if p.is_null() || is_zero_block(p) {
        return 0;
    }
    let Some((usable, large)) = core_usable(p).map(split) else {
        foreign::readable_bytes(p);
        return 0;
    };
    if large && in_quarantine(p) {
        raw::report_misuse(p, PointerMisuse::DoubleFree);
    }
    // SAFETY: a block of the heap of `usable` bytes.
    match unsafe { trailer(p, usable) } {
        Some((_, Kind::Freed)) => raw::report_misuse(p, PointerMisuse::DoubleFree),
        Some((size, _)) => size,
        None => raw::report_corruption("heap overflow: damaged trailer of block", p),
    }
}

/// Secure mode's check of a write of `n` bytes at `dst` by `memcpy`, `memmove` or `memset`
/// (`copy.rs`): when `dst` lies in a heap block, the write must stay within the bytes the
/// program asked for, in a block it holds and has not freed. Aborts naming the block otherwise.
pub(crate) fn check_write(dst: *mut u8, n: usize) {
    if n == 0 {
        return;
    }
    let Some(block) = raw::block_containing(dst) else {
        return;
    };
    if !block.held {
        report_write_to_free(dst, block);
    }
    let start = block.start;
    if raw::is_owned(start) {
        // A first-class heap's block: secure mode's layer never saw it, so it has no trailer
        // (what its last word holds is the program's, or a former block's), and its bound is
        // its slot.
        if (dst as usize - start as usize).saturating_add(n) > block.bytes {
            raw::report_corruption("heap overflow: a copy runs past the end of block", start);
        }
        return;
    }
    // A bag's object is its class's size; a large block's usable bytes leave out its guard.
    let (usable, large) = if block.large {
        let Some(usable) = core_usable(start).map(split) else {
            return;
        };
        usable
    } else {
        (block.bytes, false)
    };
    if large && in_quarantine(start) {
        report_write_after_free(start);
    }
    // SAFETY: a block of the heap of `usable` bytes; its trailer is readable (a small freed
    // block is zeroed but open; a large one in the quarantine was refused above).
    match unsafe { trailer(start, usable) } {
        Some((_, Kind::Freed)) => {
            raw::report_corruption("write after free: a copy writes into freed block", start)
        }
        Some((size, _)) if (dst as usize - start as usize).saturating_add(n) > size => {
            raw::report_corruption("heap overflow: a copy runs past the end of block", start)
        }
        // Within the block; or its trailer damaged already: its free says which.
        _ => {}
    }
}

/// A copy whose destination lies in a free block (`block`): named after the block the program
/// most likely meant, the held block just after it when the write starts in the free slot's
/// second half (an underflow), the one just before it otherwise (an overflow), or the address
/// itself when neither neighbour is held.
#[cold]
fn report_write_to_free(dst: *mut u8, block: raw::BlockAt) -> ! {
    let start = block.start as usize;
    let end = start + block.bytes;
    let offset = dst as usize - start;
    let held =
        |address: usize| raw::block_containing(address as *const u8).filter(|found| found.held);
    if offset >= block.bytes / 2 {
        if let Some(next) = held(end) {
            raw::report_corruption("heap underflow: a copy writes before block", next.start);
        }
    } else if let Some(before) = start.checked_sub(1).and_then(held) {
        raw::report_corruption(
            "heap overflow: a copy runs past the end of block",
            before.start,
        );
    }
    raw::report_corruption("heap corruption: a copy writes into free memory at", dst)
}

/// `realloc`: always a new block (the old one goes to the quarantine, so a stale pointer to it
/// is caught as a write after free).
///
/// # Safety
/// C's `realloc`.
pub(crate) unsafe fn realloc(
    ptr: *mut c_void,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    let old = ptr as *mut u8;
    if old.is_null() {
        return alloc(size, plain::MALLOC_ALIGN, Kind::Malloc, site, frame);
    }
    if size == 0 {
        // glibc frees and returns NULL.
        // SAFETY: forwarded contract.
        unsafe { free(ptr, Kind::Malloc, None) };
        return null_mut();
    }
    let copy = if is_zero_block(old) {
        0
    } else {
        // SAFETY: neither null nor a zero-size block.
        match unsafe { checked(old, Kind::Malloc, None) } {
            Some((old_size, _)) => old_size,
            None => foreign::readable_bytes(old),
        }
    };
    let new = alloc(size, plain::MALLOC_ALIGN, Kind::Malloc, site, frame);
    if new.is_null() {
        return null_mut();
    }
    // SAFETY: both blocks are live and distinct; the old one holds `copy` readable bytes.
    unsafe {
        raw::copy_unchecked(new as *mut u8, old, copy.min(size));
        free(ptr, Kind::Malloc, None);
    }
    new
}

/// The message of a sized free whose size is not the allocation's: C23's `free_sized` for
/// blocks of `malloc`, a sized `delete` for those of `new`.
pub(crate) fn wrong_size_message(kind: Kind) -> &'static str {
    match kind {
        Kind::Malloc => "free_sized with a size other than malloc's for block",
        _ => "sized delete with a size other than new's for block",
    }
}
