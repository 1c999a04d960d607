//! Which addresses are code: the executable mappings of the process, read from
//! `/proc/self/maps` at the first sample and again (at most once a second) when a return
//! address falls outside all of them (a library loaded since). A frame-pointer walk through a
//! program built without frame pointers reads words that are no frames; their "return
//! addresses" are data, stack or heap addresses, never code, and the walk stops at the first
//! one: the stack stays shallow, never wrong, and the site table does not fill with stacks
//! that name nothing (it did: 16 384 sites, every one `<unknown>`, for a benchmark built
//! without frame pointers, each sample then probing thousands of entries).
//!
//! Two tables, the one not in use rewritten by a refresh (which one thread at a time makes, by
//! a try-lock: the others answer from the table in use). A reader racing a second refresh of
//! its table may answer wrong for a frame: a profile's shallower or deeper stack, never memory
//! read outside the tables.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Executable mappings kept; a process with more keeps its first ones (its main program and
/// first libraries), and the walk stops at addresses past them.
const RANGES: usize = 256;

struct Table {
    count: AtomicUsize,
    starts: [AtomicUsize; RANGES],
    ends: [AtomicUsize; RANGES],
}

impl Table {
    const fn new() -> Table {
        Table {
            count: AtomicUsize::new(0),
            starts: [const { AtomicUsize::new(0) }; RANGES],
            ends: [const { AtomicUsize::new(0) }; RANGES],
        }
    }

    /// True when `address` lies in one of the table's ranges (sorted: a binary search).
    fn contains(&self, address: usize) -> bool {
        let count = self.count.load(Ordering::Acquire).min(RANGES);
        let (mut low, mut high) = (0, count);
        while low < high {
            let middle = (low + high) / 2;
            if self.ends[middle].load(Ordering::Relaxed) <= address {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low < count && self.starts[low].load(Ordering::Relaxed) <= address
    }

    /// Fills the table from `/proc/self/maps` (whose lines come in address order); false when
    /// it cannot be read.
    fn load(&self) -> bool {
        let mut count = 0;
        let read = crate::os::proc::for_each_code_mapping(|start, end| {
            self.starts[count].store(start, Ordering::Relaxed);
            self.ends[count].store(end, Ordering::Relaxed);
            count += 1;
            count < RANGES
        });
        self.count.store(count, Ordering::Release);
        read
    }
}

static TABLES: [Table; 2] = [Table::new(), Table::new()];
/// The table in use (0 or 1), or 2 before the first load.
static CURRENT: AtomicUsize = AtomicUsize::new(2);
/// Held by the thread that refreshes.
static REFRESHING: AtomicBool = AtomicBool::new(false);
/// When the tables were last read, in monotonic ns.
static LOADED_AT: AtomicU64 = AtomicU64::new(0);

/// True when `address` is in an executable mapping of the process (see the module's doc).
/// Before any table could be read (`/proc` not mounted), every address is taken for code, as
/// the walk did before it checked.
pub(crate) fn is_code(address: usize) -> bool {
    let current = CURRENT.load(Ordering::Acquire);
    if current < 2 && TABLES[current].contains(address) {
        return true;
    }
    if refresh(current) {
        return TABLES[CURRENT.load(Ordering::Acquire) % 2].contains(address);
    }
    CURRENT.load(Ordering::Acquire) == 2
}

/// Reads the mappings again into the table not in use and makes it current, unless another
/// thread is at it or the last read was less than a second ago; true when it did.
#[cold]
#[inline(never)]
fn refresh(current: usize) -> bool {
    let now = crate::os::monotonic_ns();
    let last = LOADED_AT.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < 1_000_000_000 {
        return false;
    }
    if REFRESHING.swap(true, Ordering::Acquire) {
        return false;
    }
    let next = if current == 0 { 1 } else { 0 };
    let loaded = TABLES[next].load();
    if loaded {
        CURRENT.store(next, Ordering::Release);
    }
    LOADED_AT.store(now, Ordering::Relaxed);
    REFRESHING.store(false, Ordering::Release);
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_code_and_data_is_not() {
        let function = is_code as *const () as usize;
        assert!(is_code(function), "this crate's own code at {function:#x}");
        let on_stack = 0u64;
        assert!(!is_code(&on_stack as *const u64 as usize));
        static DATA: u64 = 7;
        assert!(!is_code(&DATA as *const u64 as usize));
        assert!(!is_code(16));
    }
}
