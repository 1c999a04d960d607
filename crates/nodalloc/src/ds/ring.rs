//! The transfer ring: a bounded multi-producer multi-consumer queue of *batches* (object chains
//! with head, tail and count), after Dmitry Vyukov's bounded MPMC queue.
//!
//! Threads of one node hand whole batches to each other through it with one compare-and-swap
//! per batch: a thread that drains its cache pushes, a thread that refills pops. Each slot carries
//! a sequence number, and positions are full-width counters, so a slot is never mistaken for a
//! newer or older use of itself (no ABA). The payload words are relaxed atomics ordered by the
//! sequence number's release/acquire pair, which also lets loom check that ordering.
//!
//! A ring is valid once its memory is zeroed and [`TransferRing::init`] has run.

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// Slots per ring. A power of two so a position maps to a slot with a mask. 64 batches of about
/// 64 objects per class and node carry a producer/consumer flow without the central bag lists
/// (at 32, a third of such a flow's objects went through the bags); [`TransferRing::push`]
/// takes a per-class cap on top, the ring's byte budget. Big classes move small batches (8
/// objects of 4 KiB), and at 64 slots a thread that freed a thousand 4 KiB objects at once sent
/// three quarters of them through the bags (docs/JOURNAL.md, "Fifteenth round: rings for big
/// bursts"). A slot is 32 bytes, untouched until used.
pub const RING_SLOTS: usize = 128;
const MASK: usize = RING_SLOTS - 1;

/// A chain of free objects linked through their first word: `head` … `tail`, `count` objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub head: *mut u8,
    pub tail: *mut u8,
    pub count: usize,
}

impl Batch {
    /// No object.
    pub const EMPTY: Batch = Batch {
        head: core::ptr::null_mut(),
        tail: core::ptr::null_mut(),
        count: 0,
    };
}

struct Slot {
    /// The slot's sequence number minus its index (see [`Slot::sequence`]).
    sequence_offset: AtomicUsize,
    head: AtomicPtr<u8>,
    tail: AtomicPtr<u8>,
    count: AtomicUsize,
}

impl Slot {
    /// The sequence number of the slot at `index`. Slot `i` starts at sequence `i`; storing the
    /// number relative to the index makes all-zero memory a ready ring, so a ring in a fresh
    /// mapping costs no page until it is used (a node heap holds one per class).
    #[inline(always)]
    fn sequence(&self, index: usize, order: Ordering) -> usize {
        self.sequence_offset.load(order).wrapping_add(index)
    }

    #[inline(always)]
    fn set_sequence(&self, index: usize, sequence: usize, order: Ordering) {
        self.sequence_offset
            .store(sequence.wrapping_sub(index), order);
    }
}

/// All-zero memory is an empty ring.
pub struct TransferRing {
    enqueue_position: AtomicUsize,
    dequeue_position: AtomicUsize,
    slots: [Slot; RING_SLOTS],
}

#[cfg(any(test, loom))]
impl Default for TransferRing {
    fn default() -> Self {
        Self::new()
    }
}

impl TransferRing {
    /// An empty ring, for tests and models; node heaps take theirs from zeroed memory.
    #[cfg(any(test, loom))]
    pub fn new() -> Self {
        TransferRing {
            enqueue_position: AtomicUsize::new(0),
            dequeue_position: AtomicUsize::new(0),
            slots: core::array::from_fn(|_| Slot {
                sequence_offset: AtomicUsize::new(0),
                head: AtomicPtr::new(core::ptr::null_mut()),
                tail: AtomicPtr::new(core::ptr::null_mut()),
                count: AtomicUsize::new(0),
            }),
        }
    }

    /// An estimate of the batches held; exact when no push or pop is in flight.
    pub fn len_hint(&self) -> usize {
        let enqueued = self.enqueue_position.load(Ordering::Relaxed);
        let dequeued = self.dequeue_position.load(Ordering::Relaxed);
        enqueued.wrapping_sub(dequeued).min(RING_SLOTS)
    }

    /// Offers a batch. Refused (the batch comes back) when the ring is full or already holds
    /// `cap` batches, so the caller returns the objects to their bags instead.
    #[cfg(any(test, loom))]
    pub fn push(&self, batch: Batch, cap: usize) -> Result<(), Batch> {
        self.push_counting_retries(batch, cap, &mut 0)
    }

    /// Takes the oldest batch, if any.
    #[cfg(any(test, loom))]
    pub fn pop(&self) -> Option<Batch> {
        self.pop_counting_retries(&mut 0)
    }

    /// [`TransferRing::push`], adding to `retries` the passes that had to start over (a
    /// compare-and-swap lost to another producer, or a position read stale): the statistics'
    /// measure of how often threads collide on the ring.
    pub fn push_counting_retries(
        &self,
        batch: Batch,
        cap: usize,
        retries: &mut u64,
    ) -> Result<(), Batch> {
        let mut position = self.enqueue_position.load(Ordering::Relaxed);
        loop {
            if position.wrapping_sub(self.dequeue_position.load(Ordering::Relaxed)) >= cap {
                return Err(batch);
            }
            let index = position & MASK;
            let slot = &self.slots[index];
            // Acquire: pairs with the release in `pop`, so the consumer is done with the payload.
            let sequence = slot.sequence(index, Ordering::Acquire);
            let lag = sequence as isize - position as isize;
            if lag == 0 {
                match self.enqueue_position.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.head.store(batch.head, Ordering::Relaxed);
                        slot.tail.store(batch.tail, Ordering::Relaxed);
                        slot.count.store(batch.count, Ordering::Relaxed);
                        // Release: the payload is visible to whoever acquires this sequence.
                        slot.set_sequence(index, position.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => {
                        position = current;
                        *retries += 1;
                    }
                }
            } else if lag < 0 {
                return Err(batch);
            } else {
                position = self.enqueue_position.load(Ordering::Relaxed);
                *retries += 1;
            }
        }
    }

    /// [`TransferRing::pop`], adding to `retries` the passes that had to start over (see
    /// [`TransferRing::push_counting_retries`]).
    pub fn pop_counting_retries(&self, retries: &mut u64) -> Option<Batch> {
        let mut position = self.dequeue_position.load(Ordering::Relaxed);
        loop {
            let index = position & MASK;
            let slot = &self.slots[index];
            // Acquire: pairs with the release in `push`, so the payload is visible.
            let sequence = slot.sequence(index, Ordering::Acquire);
            let lag = sequence as isize - position.wrapping_add(1) as isize;
            if lag == 0 {
                match self.dequeue_position.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let batch = Batch {
                            head: slot.head.load(Ordering::Relaxed),
                            tail: slot.tail.load(Ordering::Relaxed),
                            count: slot.count.load(Ordering::Relaxed),
                        };
                        // Release: our payload reads are done before a producer reuses the slot.
                        slot.set_sequence(
                            index,
                            position.wrapping_add(RING_SLOTS),
                            Ordering::Release,
                        );
                        return Some(batch);
                    }
                    Err(current) => {
                        position = current;
                        *retries += 1;
                    }
                }
            } else if lag < 0 {
                return None;
            } else {
                position = self.dequeue_position.load(Ordering::Relaxed);
                *retries += 1;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn batch(tag: usize) -> Batch {
        Batch {
            head: tag as *mut u8,
            tail: (tag + 1) as *mut u8,
            count: tag,
        }
    }

    #[test]
    fn batches_come_out_whole_and_in_order() {
        let ring = TransferRing::new();
        for tag in 1..=10 {
            ring.push(batch(tag * 16), RING_SLOTS).unwrap();
        }
        assert_eq!(ring.len_hint(), 10);
        for tag in 1..=10 {
            assert_eq!(ring.pop(), Some(batch(tag * 16)));
        }
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn push_is_refused_at_capacity_and_at_the_cap() {
        let ring = TransferRing::new();
        for tag in 0..RING_SLOTS {
            ring.push(batch(tag), RING_SLOTS).unwrap();
        }
        assert_eq!(ring.push(batch(99), RING_SLOTS), Err(batch(99)));
        let ring = TransferRing::new();
        ring.push(batch(1), 2).unwrap();
        ring.push(batch(2), 2).unwrap();
        assert_eq!(ring.push(batch(3), 2), Err(batch(3)));
        ring.pop().unwrap();
        ring.push(batch(3), 2).unwrap();
    }

    #[test]
    fn wraps_around_many_times() {
        let ring = TransferRing::new();
        for round in 0..10 * RING_SLOTS {
            ring.push(batch(round), RING_SLOTS).unwrap();
            assert_eq!(ring.pop(), Some(batch(round)));
        }
    }

    #[test]
    fn concurrent_producers_and_consumers_lose_and_duplicate_nothing() {
        use std::sync::atomic::AtomicUsize as StdAtomic;
        use std::sync::Arc;
        const PER_PRODUCER: usize = 20_000;
        let ring = Arc::new(TransferRing::new());
        let seen = Arc::new(
            (0..4 * PER_PRODUCER)
                .map(|_| StdAtomic::new(0))
                .collect::<Vec<_>>(),
        );
        let consumed = Arc::new(StdAtomic::new(0));
        let mut handles = Vec::new();
        for producer in 0..4 {
            let ring = ring.clone();
            handles.push(std::thread::spawn(move || {
                for i in 0..PER_PRODUCER {
                    let tag = producer * PER_PRODUCER + i;
                    let mut item = batch(tag);
                    while let Err(back) = ring.push(item, RING_SLOTS) {
                        item = back;
                        std::thread::yield_now();
                    }
                }
            }));
        }
        for _ in 0..4 {
            let (ring, seen, consumed) = (ring.clone(), seen.clone(), consumed.clone());
            handles.push(std::thread::spawn(move || {
                while consumed.load(std::sync::atomic::Ordering::Relaxed) < 4 * PER_PRODUCER {
                    if let Some(b) = ring.pop() {
                        assert_eq!(b.tail as usize, b.head as usize + 1, "torn batch");
                        assert_eq!(b.count, b.head as usize, "torn batch");
                        seen[b.count].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        consumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    } else {
                        std::thread::yield_now();
                    }
                }
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        for (tag, count) in seen.iter().enumerate() {
            assert_eq!(
                count.load(std::sync::atomic::Ordering::Relaxed),
                1,
                "batch {tag}"
            );
        }
    }
}
