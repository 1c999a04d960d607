//! `fastpath ALLOC SIZE N`: N alloc+free pairs of SIZE bytes through one
//! allocator, nothing else: the program the `callgrind` suite
//! (`src/suites/callgrind.rs`, which builds it and does the counting) runs
//! under valgrind for the Rust face of each allocator.
//!
//! A binary of its own, not a mode of the showdown: the count includes the
//! code generated for this loop, and the same loop compiled inside the
//! showdown's larger crate came out 10 instructions per pair shorter for
//! nodalloc (most of the size-class lookup hoisted out of the loop); a small,
//! stable crate keeps the figures comparable across changes to the harness.

use nodalloc_bench::workloads::layout;
use nodalloc_bench::{with_allocator, Allocator};
use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::process::ExitCode;

/// Enough pairs to initialise the allocator and its thread cache for the size
/// class, so the measured loop sees only the steady-state fast path.
const WARM_UP: u64 = 64;

/// The harness alone: hands out one static block and frees nothing, so
/// `fastpath overhead SIZE N` counts the loop, the null check and the
/// `black_box`es that every real allocator's figure also contains.
struct Overhead;

static BLOCK: [u64; 1] = [0];

// SAFETY: `alloc` returns a valid, 8-aligned pointer to static memory; the
// caller never writes through it (`pairs` only passes it to `dealloc`), and
// `dealloc` does nothing, so nothing is freed.
unsafe impl GlobalAlloc for Overhead {
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        BLOCK.as_ptr() as *mut u8
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

static OVERHEAD: Overhead = Overhead;

#[inline(never)]
fn pairs<A: GlobalAlloc>(a: &A, size: usize, n: u64) {
    let layout = layout(size);
    for _ in 0..n {
        // SAFETY: `layout` has a non-zero size; the pointer is checked for
        // null and freed with the layout it was allocated with.
        unsafe {
            // The size through `black_box` on every pair, as a call in a program sees it:
            // otherwise the compiler may hoist the size's tests and the class lookup out of
            // the loop (it did for nodalloc: 11 instructions fewer than a call executes).
            let layout =
                Layout::from_size_align_unchecked(black_box(layout.size()), layout.align());
            let p = black_box(a.alloc(layout));
            assert!(!p.is_null(), "alloc({size}) returned null");
            a.dealloc(black_box(p), layout);
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = || {
        eprintln!(
            "usage: fastpath ALLOC SIZE N   \
             (ALLOC: nodalloc, system, mimalloc, jemalloc, snmalloc, numalloc, overhead)"
        );
        ExitCode::from(2)
    };
    if args.len() != 4 {
        return usage();
    }
    let (Ok(size), Ok(n)) = (args[2].parse::<usize>(), args[3].parse::<u64>()) else {
        return usage();
    };
    if size == 0 {
        return usage();
    }
    if args[1] == "overhead" {
        pairs(&OVERHEAD, size, WARM_UP);
        pairs(&OVERHEAD, size, n);
        return ExitCode::SUCCESS;
    }
    let Some(alloc) = Allocator::from_name(&args[1]) else {
        return usage();
    };
    if !alloc.is_available() {
        eprintln!("fastpath: {alloc} was not built");
        return ExitCode::from(3);
    }
    with_allocator!(alloc, |a| {
        pairs(a, size, WARM_UP);
        pairs(a, size, n);
    });
    ExitCode::SUCCESS
}
