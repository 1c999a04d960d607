//! loom models of the lock-free structures, compiled against loom's atomics through the crate's
//! `sync` shim, so the shipped code is what is model-checked.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nodalloc --test loom --release`
//!
//! The lock's protocol (its spin-then-park on a modelled futex) is modelled beside it, in
//! `ds::spinlock`'s `loom_tests` (`cargo test -p nodalloc --lib --release ds::` with the same
//! flags), and stress-tested there without loom.
#![cfg(loom)]

use loom::thread;
use nodalloc::ds::inbox::Inbox;
use nodalloc::ds::next_of;
use nodalloc::ds::ring::{Batch, TransferRing};
use std::sync::Arc;

/// Explores interleavings with up to three preemptions: enough to reach every ordering of the
/// two- and three-thread races below, and it keeps spin loops finite.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

fn batch(tag: usize) -> Batch {
    Batch {
        head: (tag * 16) as *mut u8,
        tail: (tag * 16 + 8) as *mut u8,
        count: tag,
    }
}

/// Two producers and one consumer: every batch arrives exactly once, whole.
#[test]
fn ring_hands_over_whole_batches_exactly_once() {
    model(|| {
        let ring = Arc::new(TransferRing::new());
        let producers: Vec<_> = (1..=2)
            .map(|tag| {
                let ring = ring.clone();
                thread::spawn(move || ring.push(batch(tag), 32).is_ok())
            })
            .collect();
        let mut seen = Vec::new();
        if let Some(b) = ring.pop() {
            seen.push(b);
        }
        let pushed: usize = producers
            .into_iter()
            .map(|p| p.join().unwrap() as usize)
            .sum();
        while let Some(b) = ring.pop() {
            seen.push(b);
        }
        assert_eq!(pushed, 2);
        assert_eq!(seen.len(), 2);
        for b in &seen {
            assert_eq!(*b, batch(b.count), "torn batch");
        }
        assert_ne!(seen[0].count, seen[1].count);
    });
}

/// A consumer racing a producer over a one-slot-wide window (wrap-around): no batch is lost
/// or duplicated when the slot is reused.
#[test]
fn ring_slot_reuse_is_aba_safe() {
    model(|| {
        let ring = Arc::new(TransferRing::new());
        ring.push(batch(1), 32).unwrap();
        let consumer = {
            let ring = ring.clone();
            thread::spawn(move || ring.pop())
        };
        let second = ring.push(batch(2), 1);
        let first = consumer.join().unwrap();
        let mut all: Vec<usize> = first.into_iter().map(|b| b.count).collect();
        while let Some(b) = ring.pop() {
            all.push(b.count);
        }
        if second.is_ok() {
            all.sort();
            assert_eq!(all, vec![1, 2]);
        } else {
            assert_eq!(all, vec![1]);
        }
    });
}

/// Two threads push chains into an inbox while the owner takes everything: all objects arrive,
/// with their links intact.
#[test]
fn inbox_delivers_every_chain() {
    model(|| {
        let inbox = Arc::new(Inbox::new());
        let pushers: Vec<_> = (0..2)
            .map(|_| {
                let inbox = inbox.clone();
                thread::spawn(move || {
                    let a = Box::into_raw(Box::new([0usize; 2])) as *mut u8;
                    let b = Box::into_raw(Box::new([0usize; 2])) as *mut u8;
                    // SAFETY: two owned 16-byte objects; link a -> b and hand the chain over.
                    unsafe {
                        nodalloc::ds::set_next(a, b);
                        inbox.push_chain(a, b);
                    }
                })
            })
            .collect();
        let mut count = 0;
        let mut drain = |inbox: &Inbox| {
            let mut object = inbox.take_all();
            while !object.is_null() {
                // SAFETY: objects in the inbox are live boxes linked through their first word.
                let next = unsafe { next_of(object) };
                // SAFETY: each object came from Box::into_raw of a [usize; 2].
                drop(unsafe { Box::from_raw(object as *mut [usize; 2]) });
                object = next;
                count += 1;
            }
        };
        drain(&inbox);
        for p in pushers {
            p.join().unwrap();
        }
        drain(&inbox);
        assert_eq!(count, 4);
    });
}
