//! Secure mode's quarantine: a freed block waits in its thread's quarantine (zeroed, or made
//! inaccessible when large) before the core takes it back, and is checked on the way out.

use super::trailer::{all_zero, trailer, TRAILER};
use super::{split, Kind};
use crate::plain;
use core::ffi::c_void;
use core::ptr::null_mut;
use nodalloc_core::raw;

/// Blocks the quarantine of a thread holds at most (one page holds them).
const QUARANTINE_SLOTS: usize = 253;
/// Bytes of blocks the quarantine of a thread holds at most; a block above a quarter of it goes
/// straight back.
pub(super) const QUARANTINE_BYTES: usize = 4 << 20;
/// A thread's quarantine: a ring of freed blocks in one mapped page.
#[repr(C)]
struct Quarantine {
    /// Index of the oldest block, blocks held, and their bytes.
    first: usize,
    len: usize,
    bytes: usize,
    /// The next block [`check_recent`] checks besides the newest, the frees that asked for such
    /// a check, and whether the newest was checked since it came in.
    cursor: usize,
    asked: usize,
    newest_checked: bool,
    blocks: [(usize, usize); QUARANTINE_SLOTS],
}

const _: () = assert!(core::mem::size_of::<Quarantine>() <= 4096);

crate::tls::thread_cell! {
    /// The thread's quarantine (null until its first free; mapping failed: 1).
    fn quarantine_slot() -> *mut Quarantine = "nodalloc_thread_quarantine", 8
}

const NO_QUARANTINE: *mut Quarantine = 1 as *mut Quarantine;

fn thread_quarantine() -> Option<&'static mut Quarantine> {
    // SAFETY: the calling thread's own cell, which only it reads or writes.
    let mut q = unsafe { *quarantine_slot() };
    if q.is_null() {
        // SAFETY: a fresh private page, zeroed (an empty quarantine).
        let page = unsafe {
            libc::mmap(
                null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        q = if page == libc::MAP_FAILED {
            NO_QUARANTINE
        } else {
            page as *mut Quarantine
        };
        // SAFETY: as above.
        unsafe { *quarantine_slot() = q };
    }
    if q == NO_QUARANTINE {
        return None;
    }
    // SAFETY: the thread's own page, used by this thread alone.
    Some(unsafe { &mut *q })
}

/// Puts a freed block in the thread's quarantine, letting the oldest go when it is full.
///
/// # Safety
/// `p` is a block of `tagged` usable bytes (see [`core_usable`]) the program freed: checked,
/// then zeroed (a block of a class) or made inaccessible (a large one).
pub(super) unsafe fn quarantine(p: *mut u8, tagged: usize) {
    let usable = split(tagged).0;
    let Some(q) = thread_quarantine() else {
        // SAFETY: forwarded contract.
        return unsafe { release(p, tagged) };
    };
    while q.len == QUARANTINE_SLOTS || (q.len > 0 && q.bytes + usable > QUARANTINE_BYTES) {
        let (old, old_usable) = q.blocks[q.first];
        q.first = (q.first + 1) % QUARANTINE_SLOTS;
        q.len -= 1;
        q.bytes -= split(old_usable).0;
        // SAFETY: a block the quarantine held.
        unsafe { release(old as *mut u8, old_usable) };
    }
    let index = (q.first + q.len) % QUARANTINE_SLOTS;
    q.blocks[index] = (p as usize, tagged);
    q.len += 1;
    q.newest_checked = false;
    q.bytes += usable;
}

/// Checks that a freed block is as its free left it: trailer "freed", zeros (for blocks that
/// were zeroed). Aborts naming it otherwise.
///
/// # Safety
/// `p` is a block of `tagged` usable bytes (see [`core_usable`]) the quarantine holds.
unsafe fn verify(p: *mut u8, tagged: usize) {
    let (usable, large) = split(tagged);
    if large {
        // Inaccessible while it waits: a write would have faulted.
        return;
    }
    // SAFETY: contract above.
    let intact = unsafe {
        matches!(trailer(p, usable), Some((_, Kind::Freed))) && all_zero(p, usable - TRAILER)
    };
    if !intact {
        report_write_after_free(p);
    }
}

#[cold]
pub(super) fn report_write_after_free(p: *mut u8) -> ! {
    raw::report_corruption("write after free: freed block was written to:", p)
}

/// A block leaves the quarantine: checked, then back to the core.
///
/// # Safety
/// As for [`verify`]; the block leaves the quarantine's list first.
unsafe fn release(p: *mut u8, tagged: usize) {
    let (usable, large) = split(tagged);
    // SAFETY: forwarded contract; a large block was made inaccessible by its free, and is ours
    // to make accessible again before the core takes it back.
    unsafe {
        verify(p, tagged);
        if large
            && libc::mprotect(p as *mut c_void, usable, libc::PROT_READ | libc::PROT_WRITE) != 0
        {
            raw::report_corruption("cannot make a freed large block accessible again:", p);
        }
        plain::free_core(p);
    }
}

/// The thread's quarantine if it has one (without mapping it).
fn existing_quarantine() -> Option<&'static mut Quarantine> {
    // SAFETY: the calling thread's own cell, which only it reads or writes.
    let q = unsafe { *quarantine_slot() };
    if q.is_null() || q == NO_QUARANTINE {
        return None;
    }
    // SAFETY: the thread's own page, used by this thread alone.
    Some(unsafe { &mut *q })
}

/// True when the thread's quarantine holds the block at `p`.
pub(super) fn in_quarantine(p: *mut u8) -> bool {
    let Some(q) = existing_quarantine() else {
        return false;
    };
    (0..q.len).any(|i| q.blocks[(q.first + i) % QUARANTINE_SLOTS].0 == p as usize)
}

/// Checks the thread's most recent free once (a write soon after a free is caught at the
/// thread's next call) and, with `other` (every `free` asks), every 8th time one other block of
/// its quarantine (a cursor that goes round: each block waiting through 8 × 253 frees is looked
/// at besides the check when it leaves).
pub(super) fn check_recent(other: bool) {
    let Some(q) = existing_quarantine() else {
        return;
    };
    if q.len == 0 {
        return;
    }
    if !q.newest_checked {
        let (p, usable) = q.blocks[(q.first + q.len - 1) % QUARANTINE_SLOTS];
        // SAFETY: a block the quarantine holds.
        unsafe { verify(p as *mut u8, usable) };
        q.newest_checked = true;
    }
    if other {
        q.asked = q.asked.wrapping_add(1);
    }
    if other && q.asked % 8 == 0 {
        q.cursor = (q.cursor + 1) % q.len;
        let (p, usable) = q.blocks[(q.first + q.cursor) % QUARANTINE_SLOTS];
        // SAFETY: as above.
        unsafe { verify(p as *mut u8, usable) };
    }
}

/// At the thread's exit (its heap still attached): every block of its quarantine goes back,
/// checked, and the page is unmapped.
pub(crate) fn flush_thread() {
    // SAFETY: the calling thread's own cell, which only it reads or writes.
    let q = unsafe { core::ptr::replace(quarantine_slot(), NO_QUARANTINE) };
    if q.is_null() || q == NO_QUARANTINE {
        return;
    }
    // SAFETY: the thread's own page, no longer reachable through the slot.
    let quarantine = unsafe { &mut *q };
    while quarantine.len > 0 {
        let (p, usable) = quarantine.blocks[quarantine.first];
        quarantine.first = (quarantine.first + 1) % QUARANTINE_SLOTS;
        quarantine.len -= 1;
        // SAFETY: a block the quarantine held.
        unsafe { release(p as *mut u8, usable) };
    }
    // SAFETY: our page, emptied.
    unsafe { libc::munmap(q as *mut c_void, 4096) };
}
