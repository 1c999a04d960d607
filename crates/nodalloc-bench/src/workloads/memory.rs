//! The Rust workloads whose memory the suite measures: the live-object cliff,
//! in-place growth, and the payload fills of the RSS-per-byte cases.

use super::{alloc_failed, alloc_obj, check_and_free, layout, misaligned, new_obj, Ledger, ALIGN};
use crate::check::word_value;
use std::alloc::GlobalAlloc;
use std::any::type_name;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Result of [`live_cliff`].
#[derive(Clone, Copy, Debug)]
pub struct Cliff {
    pub ledger: Ledger,
    /// Mean time per allocation (including its fill) over the first 10 %.
    pub first_ns: f64,
    /// The same over the last 10 %, when the heap is at its largest.
    pub last_ns: f64,
}

/// Object size of [`live_cliff`].
pub const CLIFF_SIZE: usize = 64;

/// Allocates `n` live 64 B objects (2.3 M in the real run, about 147 MB), then
/// frees them all. Compares the cost per allocation in the first and last
/// 10 %: an allocator whose metadata or search grows with the heap shows a
/// cliff.
pub fn live_cliff<A: GlobalAlloc + Sync>(a: &'static A, n: usize) -> Cliff {
    let mut ledger = Ledger::default();
    let tenth = (n / 10).max(1).min(n);
    // Written in full before the clock starts, so page faults on the
    // bookkeeping vector are not charged to the last 10 %.
    let mut ptrs: Vec<usize> = vec![1; n];
    black_box(&mut ptrs);
    let mut alloc_range = |range: std::ops::Range<usize>, ptrs: &mut [usize]| {
        let t = Instant::now();
        for i in range {
            // SAFETY: creates a checked allocation that `ptrs` owns.
            ptrs[i] = unsafe { new_obj(a, CLIFF_SIZE, i as u64, &mut ledger) } as usize;
        }
        t.elapsed()
    };
    let last_start = (n - tenth).max(tenth);
    let first = alloc_range(0..tenth, &mut ptrs);
    alloc_range(tenth..last_start, &mut ptrs);
    let last = alloc_range(last_start..n, &mut ptrs);
    let last_len = n - last_start;
    for (i, &p) in ptrs.iter().enumerate() {
        // SAFETY: every entry was set above to object `i`, freed once here.
        unsafe { check_and_free(a, p as *mut u8, CLIFF_SIZE, i as u64, &mut ledger) };
    }
    ledger.assert_balanced("live_cliff");
    let per = |d: Duration, k: usize| d.as_nanos() as f64 / k.max(1) as f64;
    Cliff {
        ledger,
        first_ns: per(first, tenth),
        last_ns: per(last, last_len),
    }
}

/// Grows one buffer from 1 byte to `max` bytes in `step`-byte increments with
/// `realloc`, writing every new byte and spot-checking that the old contents
/// moved along. Rewards allocators that grow in place or remap instead of
/// copying.
pub fn realloc_growth<A: GlobalAlloc + Sync>(a: &'static A, max: usize, step: usize) -> Ledger {
    assert!(
        step >= 8 && step.is_multiple_of(8),
        "realloc_growth: step must be a multiple of 8"
    );
    let who = type_name::<A>();
    // Position-only pattern: the buffer moves, its contents must not change.
    let tag = 0x6E0D_A110_C000_0001u64;
    let mut ledger = Ledger::default();
    // SAFETY: a 1-byte allocation, checked.
    let mut p = unsafe { alloc_obj(a, 1, &mut ledger) };
    // SAFETY: `p` holds 1 byte.
    unsafe { p.write(crate::check::byte_value(tag, 0)) };
    let mut cur = 1usize;
    while cur < max {
        let new = if cur < step { step } else { cur + step }.min(max);
        // SAFETY: `p` is live with layout `layout(cur)`; `new` is non-zero and
        // far below isize::MAX.
        let q = unsafe { a.realloc(p, layout(cur), new) };
        if q.is_null() {
            alloc_failed::<A>(new, "realloc");
        }
        if !(q as usize).is_multiple_of(ALIGN) {
            misaligned::<A>(q, new);
        }
        ledger.on_realloc(cur, new);
        p = q;
        // Spot-check old contents: the first word (or byte), the last word,
        // and the first word of every earlier step.
        if cur == 1 {
            // SAFETY: the first byte survived realloc and is in bounds.
            let b = unsafe { p.read() };
            assert_eq!(
                b,
                crate::check::byte_value(tag, 0),
                "{who}: realloc lost byte 0"
            );
        } else {
            let mut o = 0;
            while o < cur {
                check_word(who, p, o, tag);
                o += step;
            }
            check_word(who, p, cur - 8, tag);
        }
        // Touch the new part; `cur` is 1 or a multiple of `step`, so start at
        // the first whole word and rewrite byte 0 along with word 0.
        let mut o = if cur == 1 { 0 } else { cur };
        while o + 8 <= new {
            // SAFETY: `o + 8 <= new`, aligned (base 8-aligned, `o` multiple of 8).
            unsafe { p.add(o).cast::<u64>().write(word_value(tag, o)) };
            o += 8;
        }
        cur = new;
    }
    // Full check of the final buffer.
    let mut o = 0;
    while o + 8 <= cur {
        check_word(who, p, o, tag);
        o += 8;
    }
    // SAFETY: `p` is live with layout `layout(cur)`, freed once.
    unsafe { a.dealloc(p, layout(cur)) };
    ledger.on_free(cur);
    // A 1-byte start plus reallocs is one allocation, one free.
    ledger.assert_balanced("realloc_growth");
    ledger
}

#[inline(always)]
fn check_word(who: &str, p: *const u8, o: usize, tag: u64) {
    // SAFETY: callers pass `o + 8 <=` the buffer's current size, `o % 8 == 0`.
    let found = unsafe { p.add(o).cast::<u64>().read() };
    let expected = word_value(tag, o);
    assert!(
        found == expected,
        "{who}: realloc corrupted offset {o}: expected {expected:#x}, found {found:#x}"
    );
}

/// Allocates `total_bytes / size` objects of `size` bytes, all live at once,
/// each filled completely, then checks and frees them. Run in a fresh child
/// process, the peak RSS divided by the payload shows per-object overhead and
/// size-class rounding (520, 1100 and 2100 B sit just above common classes).
pub fn rss_payload<A: GlobalAlloc + Sync>(
    a: &'static A,
    size: usize,
    total_bytes: usize,
) -> Ledger {
    rss_payload_with_peak(a, size, total_bytes, || {})
}

/// [`rss_payload`], calling `at_peak` while every object is live (to read the
/// process's memory figures there).
pub fn rss_payload_with_peak<A: GlobalAlloc + Sync>(
    a: &'static A,
    size: usize,
    total_bytes: usize,
    at_peak: impl FnOnce(),
) -> Ledger {
    let n = total_bytes / size.max(1);
    let mut ledger = Ledger::default();
    let mut ptrs: Vec<usize> = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: creates a checked allocation that `ptrs` owns.
        ptrs.push(unsafe { new_obj(a, size, i as u64, &mut ledger) } as usize);
    }
    at_peak();
    for (i, p) in ptrs.into_iter().enumerate() {
        // SAFETY: object `i` created above, freed once.
        unsafe { check_and_free(a, p as *mut u8, size, i as u64, &mut ledger) };
    }
    ledger.assert_balanced("rss_payload");
    ledger
}

/// `AnonHugePages` of this process in KiB (transparent huge pages backing its
/// anonymous memory), `None` without /proc.
pub fn anon_huge_kib() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = rollup.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
