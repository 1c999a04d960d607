//! The Rust workloads, each generic over an allocator instance: what the Rust
//! suite's cases ([`crate::suites::rust::cases`]), the criterion benches and
//! the tests run.
//!
//! They return a [`Ledger`] (already checked for balance) rather than a
//! duration: the caller decides what to time, and the ledger lets tests assert
//! that the work really happened.
//!
//! Here: the ledger, the checked allocation helpers and the single-thread
//! recycling cases; `threaded.rs` the cases with several threads, `memory.rs`
//! the fills and growth whose memory the suite measures.

mod memory;
mod threaded;

pub use memory::*;
pub use threaded::*;

use crate::check::{fill, tag_for, verify_or_panic};
use std::alloc::{GlobalAlloc, Layout};
use std::any::type_name;
use std::hint::black_box;

/// Alignment of every object: what a Rust `Box<u64>`/`Vec<u64>` asks for, and
/// what the word-wise fill pattern needs.
pub const ALIGN: usize = 8;

/// Counts what a workload did; `assert_balanced` turns a leak or double free in
/// the workload's own logic into a panic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub allocs: u64,
    pub frees: u64,
    pub reallocs: u64,
    pub bytes_allocated: u64,
    live_bytes: u64,
    /// Peak of live payload bytes (summed per-thread peaks for multi-threaded
    /// workloads, so an upper bound of the true simultaneous peak).
    pub peak_live_bytes: u64,
}

impl Ledger {
    /// Records one allocation of `size` bytes.
    #[inline(always)]
    pub fn on_alloc(&mut self, size: usize) {
        self.allocs += 1;
        self.bytes_allocated += size as u64;
        self.live_bytes += size as u64;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    /// Records one free of `size` bytes.
    #[inline(always)]
    pub fn on_free(&mut self, size: usize) {
        self.frees += 1;
        // Wrapping: a double free must reach `assert_balanced`'s message, not
        // an arithmetic-overflow panic in debug builds.
        self.live_bytes = self.live_bytes.wrapping_sub(size as u64);
    }

    #[inline(always)]
    fn on_realloc(&mut self, old: usize, new: usize) {
        self.reallocs += 1;
        self.live_bytes = self.live_bytes.wrapping_sub(old as u64) + new as u64;
        self.bytes_allocated += new.saturating_sub(old) as u64;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    pub fn merge(&mut self, other: &Ledger) {
        self.allocs += other.allocs;
        self.frees += other.frees;
        self.reallocs += other.reallocs;
        self.bytes_allocated += other.bytes_allocated;
        self.live_bytes = self.live_bytes.wrapping_add(other.live_bytes);
        self.peak_live_bytes += other.peak_live_bytes;
    }

    /// Panics unless every allocation was freed.
    pub fn assert_balanced(&self, workload: &str) {
        assert!(
            self.allocs == self.frees && self.live_bytes == 0,
            "{workload}: unbalanced: {} allocs, {} frees, {} live bytes left",
            self.allocs,
            self.frees,
            self.live_bytes
        );
    }
}

/// The layout every workload uses for a `size`-byte object.
#[inline(always)]
pub fn layout(size: usize) -> Layout {
    match Layout::from_size_align(size.max(1), ALIGN) {
        Ok(l) => l,
        Err(_) => panic!("bad object size {size}"),
    }
}

#[cold]
#[inline(never)]
fn alloc_failed<A>(size: usize, what: &str) -> ! {
    panic!("{}: {what}({size} B) returned null", type_name::<A>());
}

#[cold]
#[inline(never)]
fn misaligned<A>(ptr: *mut u8, size: usize) -> ! {
    panic!(
        "{}: alloc({size} B) returned {ptr:p}, not {ALIGN}-aligned",
        type_name::<A>()
    );
}

/// Allocates and checks the result (non-null, aligned). `black_box` keeps the
/// compiler from pairing a known `malloc` with its `free` and deleting both, or
/// dropping the fill as dead stores, which it can do for the system allocator.
#[inline(always)]
unsafe fn alloc_obj<A: GlobalAlloc>(a: &A, size: usize, ledger: &mut Ledger) -> *mut u8 {
    // SAFETY: `layout` never has size zero.
    let p = black_box(unsafe { a.alloc(layout(size)) });
    if p.is_null() {
        alloc_failed::<A>(size, "alloc");
    }
    if !(p as usize).is_multiple_of(ALIGN) {
        misaligned::<A>(p, size);
    }
    ledger.on_alloc(size);
    p
}

/// Verifies the pattern of object number `index`, then frees it.
///
/// # Safety
/// `p` must be a live allocation of `a` of `size` bytes, filled with
/// `tag_for(p, index)`.
#[inline(always)]
unsafe fn check_and_free<A: GlobalAlloc>(
    a: &A,
    p: *mut u8,
    size: usize,
    index: u64,
    ledger: &mut Ledger,
) {
    // SAFETY: per the contract, `p` is live, `size` bytes, 8-aligned.
    unsafe { verify_or_panic(p, size, tag_for(p, index), type_name::<A>()) };
    // SAFETY: `p` came from `a` with exactly this layout and is freed once.
    unsafe { a.dealloc(black_box(p), layout(size)) };
    ledger.on_free(size);
}

/// Allocates a fresh object and writes its pattern.
#[inline(always)]
unsafe fn new_obj<A: GlobalAlloc>(a: &A, size: usize, index: u64, ledger: &mut Ledger) -> *mut u8 {
    // SAFETY: forwarded; `alloc_obj` checks the result.
    let p = unsafe { alloc_obj(a, size, ledger) };
    // SAFETY: `p` is a fresh, checked, 8-aligned allocation of `size` bytes.
    unsafe { fill(p, size, tag_for(p, index)) };
    p
}

/// Single thread: `iters` times allocate one `size`-byte object, fill, verify,
/// free. Measures the allocator's fast path (or, for sizes above its cache
/// limits, its path to the OS).
pub fn single_size<A: GlobalAlloc + Sync>(a: &'static A, size: usize, iters: u64) -> Ledger {
    let mut ledger = Ledger::default();
    for i in 0..iters {
        // SAFETY: the object is created, checked and freed right here, with
        // the same size and index.
        unsafe {
            let p = new_obj(a, size, i, &mut ledger);
            check_and_free(a, black_box(p), size, i, &mut ledger);
        }
    }
    ledger.assert_balanced("single_size");
    ledger
}

/// `rounds` times: allocate `n` objects of `size` bytes, then free them all in
/// allocation order. Measures refill/drain of thread caches rather than a
/// single recycled slot.
pub fn bulk<A: GlobalAlloc + Sync>(a: &'static A, n: usize, size: usize, rounds: u64) -> Ledger {
    let mut ledger = Ledger::default();
    let mut ptrs: Vec<*mut u8> = Vec::with_capacity(n);
    for _ in 0..rounds {
        for i in 0..n {
            // SAFETY: creates a checked allocation that `ptrs` owns.
            ptrs.push(unsafe { new_obj(a, size, i as u64, &mut ledger) });
        }
        for (i, p) in ptrs.drain(..).enumerate() {
            // SAFETY: `p` was created above as object `i` of `size` bytes and
            // leaves `ptrs` here, so it is freed exactly once.
            unsafe { check_and_free(a, p, size, i as u64, &mut ledger) };
        }
    }
    ledger.assert_balanced("bulk");
    ledger
}
