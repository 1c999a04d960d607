//! The Rust workloads with several threads: random steps on private slots,
//! a producer/consumer pair, mixed lifetimes, and Hoard's NUMA stress.

use super::{check_and_free, new_obj, Ledger};
use crate::prng::Rng;
use std::alloc::GlobalAlloc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::ScopedJoinHandle;

/// The workers' ledgers, in order (`what` names the workload if one panicked).
fn joined(handles: Vec<ScopedJoinHandle<'_, Ledger>>, what: &str) -> Vec<Ledger> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| panic!("{what}: worker panicked"))
        })
        .collect()
}

/// Runs `work(tid)` on `t` threads; their ledgers, in order.
fn each_worker(t: usize, what: &str, work: impl Fn(usize) -> Ledger + Sync) -> Vec<Ledger> {
    let work = &work;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..t).map(|tid| s.spawn(move || work(tid))).collect();
        joined(handles, what)
    })
}

/// The workers' ledgers as one, checked for balance.
fn merged(ledgers: &[Ledger], what: &str) -> Ledger {
    let mut total = Ledger::default();
    for l in ledgers {
        total.merge(l);
    }
    total.assert_balanced(what);
    total
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
    let ledgers = each_worker(t, "threads", |tid| threads_worker(a, tid, ops));
    for l in &ledgers {
        l.assert_balanced("threads (per thread)");
    }
    merged(&ledgers, "threads")
}

/// One thread of [`threads`].
fn threads_worker<A: GlobalAlloc + Sync>(a: &'static A, tid: usize, ops: u64) -> Ledger {
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
            unsafe { check_and_free(a, slot.0 as *mut u8, slot.1, slot.2, &mut ledger) };
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
        unsafe { check_and_free(a, slot.0 as *mut u8, slot.1, slot.2, &mut ledger) };
    }
    ledger
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
    let ledgers = each_worker(t, "mixed", |tid| mixed_worker(a, tid, ops, size_div));
    merged(&ledgers, "mixed")
}

/// One thread of [`mixed`].
fn mixed_worker<A: GlobalAlloc + Sync>(
    a: &'static A,
    tid: usize,
    ops: u64,
    size_div: u64,
) -> Ledger {
    let mut ledger = Ledger::default();
    let mut rng = Rng::new(0x313_7ED0 + tid as u64);
    // (ptr, size, index) of the objects that die at each tick.
    let mut wheel: Vec<Vec<(usize, usize, u64)>> =
        (0..WHEEL).map(|_| Vec::with_capacity(4)).collect();
    let free_bucket = |bucket: &mut Vec<(usize, usize, u64)>, ledger: &mut Ledger| {
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
        joined(handles, "hoard_numa")
    });
    merged(&ledgers, "hoard_numa")
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
