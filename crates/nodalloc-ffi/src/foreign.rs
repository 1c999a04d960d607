//! Pointers nodalloc did not hand out.
//!
//! Before nodalloc's first `malloc`, the dynamic loader serves allocations from its own minimal
//! allocator; a few of those blocks can later reach our `free` or `realloc`. They can only lie in
//! mappings that existed before nodalloc started, so the first call records the process's
//! writable private mappings (except stacks); a foreign pointer inside one of them is left alone
//! (it cannot be given back, and leaking it is harmless), any other foreign pointer is a bug in
//! the program and aborts with a message naming it, as glibc would.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const MAX_RANGES: usize = 64;
static RECORDED: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static STARTS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];
static ENDS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];

/// Records the writable private mappings that exist now (once, at the first call).
pub fn remember_startup_mappings() {
    if RECORDED.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut buffer = [0u8; 16384];
    let Some(text) = nodalloc_core::raw::read_file(c"/proc/self/maps", &mut buffer) else {
        return;
    };
    let mut count = 0;
    for line in text.split(|&b| b == b'\n') {
        // "start-end perms offset dev inode path"
        let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3).unwrap_or(b"");
        if perms.len() < 4 || perms[1] != b'w' || perms[3] != b'p' || path.starts_with(b"[stack") {
            continue;
        }
        let mut bounds = range.split(|&b| b == b'-');
        let (Some(start), Some(end)) = (bounds.next().and_then(hex), bounds.next().and_then(hex))
        else {
            continue;
        };
        if count < MAX_RANGES {
            STARTS[count].store(start, Ordering::Relaxed);
            ENDS[count].store(end, Ordering::Relaxed);
            count += 1;
        }
    }
    COUNT.store(count, Ordering::Release);
}

fn hex(text: &[u8]) -> Option<usize> {
    let mut value = 0usize;
    for &digit in text {
        let d = (digit as char).to_digit(16)? as usize;
        value = value.checked_mul(16)?.checked_add(d)?;
    }
    Some(value)
}

/// The recorded mapping holding `address`, as (start, end).
fn startup_mapping(address: usize) -> Option<(usize, usize)> {
    let count = COUNT.load(Ordering::Acquire);
    (0..count)
        .map(|i| {
            (
                STARTS[i].load(Ordering::Relaxed),
                ENDS[i].load(Ordering::Relaxed),
            )
        })
        .find(|&(start, end)| address >= start && address < end)
}

/// `free` of a pointer outside nodalloc's heap.
pub fn free(ptr: *mut u8) {
    if startup_mapping(ptr as usize).is_none() {
        nodalloc_core::raw::report_misuse(ptr, nodalloc_core::raw::PointerMisuse::InvalidPointer);
    }
}

/// How many bytes `realloc` may copy from a foreign block: up to the end of its mapping (the
/// block's size is unknown; reading past it inside the mapping is harmless).
pub fn readable_bytes(ptr: *mut u8) -> usize {
    match startup_mapping(ptr as usize) {
        Some((_, end)) => end - ptr as usize,
        None => nodalloc_core::raw::report_misuse(
            ptr,
            nodalloc_core::raw::PointerMisuse::InvalidPointer,
        ),
    }
}
