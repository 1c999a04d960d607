//! The remote-free inbox of a node heap: a multi-producer, single-drain stack of object chains.
//!
//! A thread that frees objects of another node collects them in an outbox and hands the whole
//! chain over with one compare-and-swap ([`Inbox::push_chain`]); a thread of the owning node
//! takes everything at once with one swap ([`Inbox::take_all`]). Because nothing is ever popped
//! singly, a stale head seen by a pusher can only be the current list's head when the CAS
//! succeeds, so the classic Treiber ABA cannot corrupt the chain.
//!
//! Valid when zeroed (an empty inbox).

#[cfg(any(test, loom))]
use crate::ds::set_next;
use crate::sync::{AtomicPtr, Ordering};

pub struct Inbox {
    head: AtomicPtr<u8>,
}

impl Default for Inbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Inbox {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Inbox {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        Inbox {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    #[cfg(any(test, loom))]
    /// Prepends the chain `head … tail` (linked through first words).
    ///
    /// # Safety
    /// The chain must be well formed, owned by the caller, and end at `tail`; its objects must be
    /// at least 8 bytes and 8-aligned. Ownership passes to the inbox.
    pub unsafe fn push_chain(&self, head: *mut u8, tail: *mut u8) {
        // SAFETY: forwarded contract; the link is written into `tail`, which the caller owns.
        unsafe { self.push_chain_with(head, tail, |tail, next| set_next(tail, next)) }
    }

    /// As [`Inbox::push_chain`], with `link(tail, next)` writing the link from `tail` to the
    /// inbox's previous head in the caller's encoding (secure mode encodes links).
    ///
    /// # Safety
    /// As for [`Inbox::push_chain`], and `link` must only write `tail`'s link word.
    pub unsafe fn push_chain_with(
        &self,
        head: *mut u8,
        tail: *mut u8,
        link: impl Fn(*mut u8, *mut u8),
    ) {
        let mut current = self.head.load(Ordering::Relaxed);
        loop {
            // `tail` is the last object of a chain the caller owns (contract above).
            link(tail, current);
            // Release: the links written into the chain are visible to the thread that takes it.
            match self.head.compare_exchange_weak(
                current,
                head,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Takes every chain pushed so far as one null-terminated list (newest chain first).
    pub fn take_all(&self) -> *mut u8 {
        if self.head.load(Ordering::Relaxed).is_null() {
            return core::ptr::null_mut();
        }
        // Acquire: pairs with the pushers' release, so the links we will follow are visible.
        self.head.swap(core::ptr::null_mut(), Ordering::Acquire)
    }

    pub fn is_empty_hint(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ds::next_of;

    #[test]
    fn chains_from_many_threads_arrive_complete() {
        use std::sync::Arc;
        const THREADS: usize = 4;
        const CHAINS: usize = 2_000;
        const LEN: usize = 5;
        let inbox = Arc::new(Inbox::new());
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let inbox = inbox.clone();
                std::thread::spawn(move || {
                    for _ in 0..CHAINS {
                        let objects: Vec<*mut u8> = (0..LEN)
                            .map(|_| Box::into_raw(Box::new([0u64; 2])) as *mut u8)
                            .collect();
                        for pair in objects.windows(2) {
                            // SAFETY: the boxes are ours, 16 bytes, 8-aligned.
                            unsafe { set_next(pair[0], pair[1]) };
                        }
                        // SAFETY: a well-formed chain of owned objects.
                        unsafe { inbox.push_chain(objects[0], objects[LEN - 1]) };
                    }
                })
            })
            .collect();
        let mut total = 0;
        let mut drain = |inbox: &Inbox| {
            let mut object = inbox.take_all();
            while !object.is_null() {
                // SAFETY: every object in the inbox is a live box pushed above.
                let next = unsafe { next_of(object) };
                // SAFETY: the object came from Box::into_raw of a [u64; 2].
                drop(unsafe { Box::from_raw(object as *mut [u64; 2]) });
                object = next;
                total += 1;
            }
        };
        while handles.iter().any(|h| !h.is_finished()) {
            drain(&inbox);
        }
        for h in handles {
            h.join().unwrap();
        }
        drain(&inbox);
        assert_eq!(total, THREADS * CHAINS * LEN);
        assert!(inbox.is_empty_hint());
    }
}
