//! Pointers nodalloc did not hand out.
//!
//! Before nodalloc's first `malloc`, the dynamic loader serves allocations from its own minimal
//! allocator; a few of those blocks can later reach our `free` or `realloc`. They can only lie in
//! mappings that existed before nodalloc started, and only in those the loader's allocator uses:
//! anonymous ones, the `[heap]`, and the loader's own (its allocator starts in the rest of the
//! loader's last data page). So the first call records the process's writable private mappings
//! of those kinds; a foreign pointer inside one of them is left alone (it cannot be given back,
//! and leaking it is harmless), any other foreign pointer (the program's globals, another
//! library's data, a stack) is a bug in the program and aborts with a message naming it, as
//! glibc would.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const MAX_RANGES: usize = 64;
static RECORDED: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static STARTS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];
static ENDS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];

/// Records the writable private mappings that exist now (once, at the first call). Every
/// thread's first allocation calls it: past the first, it reads one flag, and the reading of
/// the maps, whose buffer is 16 KiB of stack, stays in a function of its own (its frame,
/// probed page by page as it is set up, made four pages of every new thread's stack
/// resident).
#[inline]
pub fn remember_startup_mappings() {
    if RECORDED.load(Ordering::Acquire) {
        return;
    }
    record_startup_mappings();
}

/// [`remember_startup_mappings`]'s first call.
#[cold]
#[inline(never)]
fn record_startup_mappings() {
    if RECORDED.swap(true, Ordering::AcqRel) {
        return;
    }
    // Uncleared: a process's first allocation writes only the pages its map's text reaches.
    let mut buffer = [core::mem::MaybeUninit::<u8>::uninit(); 16384];
    let Some(text) = nodalloc_core::raw::read_file_uninit(c"/proc/self/maps", &mut buffer) else {
        return;
    };
    let mut count = 0;
    // The previous mapping's end and whether it belongs to a file other than the loader: an
    // anonymous mapping right after one is that file's zero-initialised data (`.bss`).
    let mut previous_end = 0;
    let mut previous_foreign_file = false;
    // Field by field with a cursor: this runs at every process's start, and iterator chains
    // over the padding of the inode column cost it tens of microseconds.
    for line in text.split(|&b| b == b'\n') {
        // "start-end perms offset dev inode path"
        let mut at = 0;
        let range = next_field(line, &mut at);
        let perms = next_field(line, &mut at);
        for _ in 0..3 {
            next_field(line, &mut at);
        }
        let path = next_field(line, &mut at);
        let Some(dash) = range.iter().position(|&b| b == b'-') else {
            continue;
        };
        let (Some(start), Some(end)) = (hex(&range[..dash]), hex(&range[dash + 1..])) else {
            continue;
        };
        let bss_of_foreign_file = path.is_empty() && start == previous_end && previous_foreign_file;
        previous_end = end;
        if !path.is_empty() {
            previous_foreign_file = path.starts_with(b"/") && !is_loader(path);
        }
        if perms.len() < 4
            || perms[1] != b'w'
            || perms[3] != b'p'
            || !loader_may_use(path)
            || bss_of_foreign_file
        {
            continue;
        }
        if count < MAX_RANGES {
            STARTS[count].store(start, Ordering::Relaxed);
            ENDS[count].store(end, Ordering::Relaxed);
            count += 1;
        }
    }
    COUNT.store(count, Ordering::Release);
}

/// True for a mapping (by its path in `/proc/self/maps`) the loader's allocator may have used.
fn loader_may_use(path: &[u8]) -> bool {
    path.is_empty() || path == b"[heap]" || is_loader(path)
}

/// True for the dynamic loader's file (`…/ld-linux-x86-64.so.2`, `…/ld-2.31.so`).
fn is_loader(path: &[u8]) -> bool {
    path.windows(4).any(|w| w == b"/ld-")
}

/// The next space-separated field of `line` from `*at` (empty at the end of the line).
fn next_field<'a>(line: &'a [u8], at: &mut usize) -> &'a [u8] {
    while *at < line.len() && line[*at] == b' ' {
        *at += 1;
    }
    let start = *at;
    while *at < line.len() && line[*at] != b' ' {
        *at += 1;
    }
    &line[start..*at]
}

fn hex(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 2 * core::mem::size_of::<usize>() {
        return None;
    }
    let mut value = 0usize;
    for &digit in text {
        let d = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            b'A'..=b'F' => digit - b'A' + 10,
            _ => return None,
        };
        value = value << 4 | usize::from(d);
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
