//! The Rust workloads, each generic over an allocator instance: what the Rust
//! suite's cases ([`crate::suites::rust::cases`]), the criterion benches and
//! the tests run.
//!
//! They return a [`Ledger`] (already checked for balance) rather than a
//! duration: the caller decides what to time, and the ledger lets tests assert
//! that the work really happened.

use crate::check::{fill, tag_for, verify_or_panic, word_value};
use crate::prng::Rng;
use std::alloc::{GlobalAlloc, Layout};
use std::any::type_name;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

/// Smallest and largest size of the `threads` workload.
pub const THREADS_MIN_SIZE: u64 = 8;
pub const THREADS_MAX_SIZE: u64 = 512;
const THREAD_SLOTS: usize = 256;

/// `t` threads, each doing `ops` random steps on its own 256 slots: an empty
/// slot gets a new object of 8–512 B, a full one is checked and freed. Threads
/// are independent; this measures scaling of thread-local paths and contention
/// on shared state.
pub fn threads<A: GlobalAlloc + Sync>(a: &'static A, t: usize, ops: u64) -> Ledger {
    let ledgers: Vec<Ledger> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..t)
            .map(|tid| {
                s.spawn(move || {
                    let mut ledger = Ledger::default();
                    let mut rng = Rng::new(0x7EAD_0000 + tid as u64);
                    // (ptr, size, index); ptr 0 means empty.
                    let mut slots = [(0usize, 0usize, 0u64); THREAD_SLOTS];
                    for op in 0..ops {
                        let slot = &mut slots[rng.below(THREAD_SLOTS as u64) as usize];
                        if slot.0 != 0 {
                            // SAFETY: a non-zero slot holds a live object this
                            // thread created with that size and index; the
                            // slot is cleared so it is freed once.
                            unsafe {
                                check_and_free(a, slot.0 as *mut u8, slot.1, slot.2, &mut ledger)
                            };
                            slot.0 = 0;
                        } else {
                            let size = rng.range(THREADS_MIN_SIZE, THREADS_MAX_SIZE) as usize;
                            // SAFETY: creates a checked allocation the slot owns.
                            let p = unsafe { new_obj(a, size, op, &mut ledger) };
                            *slot = (p as usize, size, op);
                        }
                    }
                    for slot in slots.iter().filter(|s| s.0 != 0) {
                        // SAFETY: as above; `slots` is dropped right after.
                        unsafe {
                            check_and_free(a, slot.0 as *mut u8, slot.1, slot.2, &mut ledger)
                        };
                    }
                    ledger
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("threads: worker panicked"))
            .collect()
    });
    let mut total = Ledger::default();
    for l in &ledgers {
        l.assert_balanced("threads (per thread)");
        total.merge(l);
    }
    total.assert_balanced("threads");
    total
}

/// Pads to two cache lines so producer and consumer indices never share one
/// (adjacent-line prefetch included).
#[repr(align(128))]
struct Padded<T>(T);

/// A bounded single-producer/single-consumer ring of `(ptr, size)` pairs built
/// from atomics only, so that the transport itself never allocates and costs
/// the same for every allocator.
struct SpscRing {
    slots: Box<[(AtomicUsize, AtomicUsize)]>,
    mask: usize,
    /// Next slot the consumer reads.
    head: Padded<AtomicUsize>,
    /// Next slot the producer writes.
    tail: Padded<AtomicUsize>,
}

impl SpscRing {
    fn new(capacity: usize) -> Self {
        let capacity = capacity.next_power_of_two();
        SpscRing {
            slots: (0..capacity)
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
            mask: capacity - 1,
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        }
    }

    fn push(&self, ptr: usize, size: usize) {
        let t = self.tail.0.load(Ordering::Relaxed);
        let mut spins = 0;
        while t.wrapping_sub(self.head.0.load(Ordering::Acquire)) > self.mask {
            backoff(&mut spins);
        }
        let slot = &self.slots[t & self.mask];
        slot.0.store(ptr, Ordering::Relaxed);
        slot.1.store(size, Ordering::Relaxed);
        // Release publishes the slot *and* the object's fill pattern to the
        // consumer, which acquires `tail` before reading either.
        self.tail.0.store(t.wrapping_add(1), Ordering::Release);
    }

    fn pop(&self) -> (usize, usize) {
        let h = self.head.0.load(Ordering::Relaxed);
        let mut spins = 0;
        while self.tail.0.load(Ordering::Acquire) == h {
            backoff(&mut spins);
        }
        let slot = &self.slots[h & self.mask];
        let item = (
            slot.0.load(Ordering::Relaxed),
            slot.1.load(Ordering::Relaxed),
        );
        self.head.0.store(h.wrapping_add(1), Ordering::Release);
        item
    }
}

/// Spin briefly, then yield: with 2 cores and possibly more runnable threads
/// (tests run in parallel) pure spinning could starve the other side.
fn backoff(spins: &mut u32) {
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *spins += 1;
}

/// Smallest and largest size of the producer/consumer workload.
pub const PC_MIN_SIZE: u64 = 8;
pub const PC_MAX_SIZE: u64 = 512;

/// One thread allocates `n` objects of 8–512 B and passes them through a
/// bounded SPSC ring to a second thread, which checks and frees them: every
/// free is a cross-thread (remote) free.
pub fn producer_consumer<A: GlobalAlloc + Sync>(a: &'static A, n: u64) -> Ledger {
    let ring = SpscRing::new(1024);
    let (produced, consumed) = std::thread::scope(|s| {
        let ring = &ring;
        let producer = s.spawn(move || {
            let mut ledger = Ledger::default();
            let mut rng = Rng::new(0x9C0D_0CE5);
            for i in 0..n {
                let size = rng.range(PC_MIN_SIZE, PC_MAX_SIZE) as usize;
                // SAFETY: creates a checked allocation; ownership moves to the
                // consumer through the ring.
                let p = unsafe { new_obj(a, size, i, &mut ledger) };
                ring.push(p as usize, size);
            }
            ledger
        });
        let consumer = s.spawn(move || {
            let mut ledger = Ledger::default();
            for i in 0..n {
                let (p, size) = ring.pop();
                // SAFETY: the ring delivers each object exactly once, in
                // order, so this is object `i` with its size; the producer's
                // fill happened-before via the ring's release/acquire.
                unsafe { check_and_free(a, p as *mut u8, size, i, &mut ledger) };
            }
            ledger
        });
        (
            producer
                .join()
                .expect("producer_consumer: producer panicked"),
            consumer
                .join()
                .expect("producer_consumer: consumer panicked"),
        )
    });
    assert_eq!(
        produced.allocs, consumed.frees,
        "producer_consumer: {} produced, {} consumed",
        produced.allocs, consumed.frees
    );
    let mut total = produced;
    total.merge(&consumed);
    total.assert_balanced("producer_consumer");
    total
}

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

/// Longest object lifetime, in operations, of [`mixed`].
pub const MIXED_MAX_LIFE: u64 = 2000;
const MIXED_MIN_LIFE: u64 = 50;
/// Timing-wheel length; must exceed the longest lifetime.
const WHEEL: usize = 2048;

/// Size of a [`mixed`] object: 60 % 16–256 B, 30 % 512–2048 B, 10 % 4–32 KiB,
/// each divided by `size_div` (tests use a large divisor to stay small).
#[inline(always)]
pub fn mixed_size(rng: &mut Rng, size_div: u64) -> usize {
    let r = rng.below(100);
    let (lo, hi) = if r < 60 {
        (16, 256)
    } else if r < 90 {
        (512, 2048)
    } else {
        (4096, 32 * 1024)
    };
    (rng.range(lo, hi) / size_div.max(1)).max(8) as usize
}

/// FancyAllocator-style churn: `t` threads, each doing `ops` operations. Each
/// operation first frees the objects whose lifetime ended, then allocates one
/// object (size from [`mixed_size`]) that lives 50–2000 operations. Objects
/// wait on a timing wheel (a ring of slots), so the live set reaches a steady
/// state of about 1000 objects, ~2.5 MB per thread.
pub fn mixed<A: GlobalAlloc + Sync>(a: &'static A, t: usize, ops: u64, size_div: u64) -> Ledger {
    let ledgers: Vec<Ledger> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..t)
            .map(|tid| {
                s.spawn(move || {
                    let mut ledger = Ledger::default();
                    let mut rng = Rng::new(0x313_7ED0 + tid as u64);
                    // (ptr, size, index) of the objects that die at each tick.
                    let mut wheel: Vec<Vec<(usize, usize, u64)>> =
                        (0..WHEEL).map(|_| Vec::with_capacity(4)).collect();
                    let free_bucket = |bucket: &mut Vec<(usize, usize, u64)>,
                                       ledger: &mut Ledger| {
                        for (p, size, idx) in bucket.drain(..) {
                            // SAFETY: each wheel entry is a live object this
                            // thread created with that size and index;
                            // `drain` removes it, so it is freed once.
                            unsafe { check_and_free(a, p as *mut u8, size, idx, ledger) };
                        }
                    };
                    for op in 0..ops {
                        free_bucket(&mut wheel[op as usize % WHEEL], &mut ledger);
                        let size = mixed_size(&mut rng, size_div);
                        let life = rng.range(MIXED_MIN_LIFE, MIXED_MAX_LIFE);
                        // SAFETY: creates a checked allocation the wheel owns.
                        let p = unsafe { new_obj(a, size, op, &mut ledger) };
                        wheel[(op + life) as usize % WHEEL].push((p as usize, size, op));
                    }
                    for bucket in &mut wheel {
                        free_bucket(bucket, &mut ledger);
                    }
                    ledger
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("mixed: worker panicked"))
            .collect()
    });
    let mut total = Ledger::default();
    for l in &ledgers {
        total.merge(l);
    }
    total.assert_balanced("mixed");
    total
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

/// Touches per object per thread in [`hoard_numa`], as in Hoard's NUMA stress.
pub const HOARD_TOUCHES: usize = 20;

/// Pins the calling thread to CPU `index` modulo the CPUs it may use, so
/// consecutive workers land on different CPUs (and, on a multi-node machine
/// whose CPUs are numbered node by node, spread over the nodes). Best effort:
/// a failure leaves the thread where it is.
fn pin_to_cpu(index: usize) {
    // SAFETY: `cpu_set_t` is plain old data for which all-zero is valid.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set is valid and writable, its size is passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&allowed), &mut allowed) };
    if rc != 0 {
        return;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: reads a valid set; the index is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    if cpus.is_empty() {
        return;
    }
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the CPU number comes from the allowed set, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpus[index % cpus.len()], &mut one) };
    // SAFETY: valid set and size; only this thread's affinity changes.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) };
}

/// Hoard's NUMA stress: `t` threads pinned round-robin over the CPUs form a
/// ring. Each allocates `per_thread` objects (16–512 B) in batches, writes
/// every object [`HOARD_TOUCHES`] times and passes the batch to the next
/// thread, which checks each object, touches it as many times again and frees
/// it. Every free is remote, and an allocator that hands a thread memory
/// another node freed makes every touch remote.
pub fn hoard_numa<A: GlobalAlloc + Sync>(a: &'static A, t: usize, per_thread: u64) -> Ledger {
    const BATCH: usize = 64;
    let t = t.max(2);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..t)
        .map(|_| std::sync::mpsc::sync_channel::<Vec<(usize, usize, u64)>>(4))
        .unzip();
    let ledgers: Vec<Ledger> = std::thread::scope(|s| {
        let handles: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(i, inbox)| {
                let next = senders[(i + 1) % t].clone();
                s.spawn(move || {
                    pin_to_cpu(i);
                    // Allocations and frees of others' objects are counted
                    // apart: each half alone never goes below zero.
                    let mut ledger = Ledger::default();
                    let mut freed = Ledger::default();
                    let mut rng = Rng::new(0x40A2_D000 + i as u64);
                    let mut made = 0u64;
                    let mut batch = Vec::with_capacity(BATCH);
                    let base = (i as u64) << 40;
                    let mut received = 0u64;
                    let mut next = Some(next);
                    let drain = |b: Vec<(usize, usize, u64)>, ledger: &mut Ledger| {
                        for (p, size, index) in b {
                            let p = p as *mut u8;
                            for k in 0..HOARD_TOUCHES {
                                // SAFETY: the object is live, `size` ≥ 16
                                // bytes, handed over by the channel.
                                unsafe { touch(p, size, k) };
                            }
                            // SAFETY: object `index` of this size, filled by
                            // its allocator thread; every touch restored the
                            // word it changed.
                            unsafe { check_and_free(a, p, size, index, ledger) };
                        }
                    };
                    while made < per_thread {
                        let size = rng.range(16, 512) as usize;
                        // SAFETY: a fresh checked object; ownership moves on.
                        let p = unsafe { new_obj(a, size, base + made, &mut ledger) };
                        for k in 0..HOARD_TOUCHES {
                            // SAFETY: just allocated, `size` ≥ 16 bytes.
                            unsafe { touch(p, size, k) };
                        }
                        batch.push((p as usize, size, base + made));
                        made += 1;
                        if batch.len() == BATCH || made == per_thread {
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                            if let Some(tx) = &next {
                                tx.send(full).expect("hoard_numa: ring broken");
                            }
                        }
                        // Keep the ring moving: take what arrived meanwhile.
                        while let Ok(b) = inbox.try_recv() {
                            received += b.len() as u64;
                            drain(b, &mut freed);
                        }
                    }
                    // Own work is out: close our side, then drain until the
                    // predecessor has closed its side too.
                    next.take();
                    while received < per_thread {
                        let b = inbox.recv().expect("hoard_numa: predecessor gone early");
                        received += b.len() as u64;
                        drain(b, &mut freed);
                    }
                    ledger.merge(&freed);
                    ledger
                })
            })
            .collect();
        drop(senders);
        handles
            .into_iter()
            .map(|h| h.join().expect("hoard_numa: worker panicked"))
            .collect()
    });
    let mut total = Ledger::default();
    for l in &ledgers {
        total.merge(l);
    }
    total.assert_balanced("hoard_numa");
    total
}

/// One touch of an object: rewrites its last word with itself plus `k`
/// minus `k` (a read-modify-write the pattern check does not see change).
///
/// # Safety
/// `p` must be a live allocation of at least `size` ≥ 8 bytes, 8-aligned.
#[inline(always)]
unsafe fn touch(p: *mut u8, size: usize, k: usize) {
    // SAFETY: per the contract the word lies inside the object.
    let w = unsafe { p.add((size - 8) & !7) as *mut u64 };
    // SAFETY: as above; volatile so the touches are not folded away.
    unsafe {
        let v = w.read_volatile();
        w.write_volatile(v.wrapping_add(k as u64));
        w.write_volatile(v);
    }
}
