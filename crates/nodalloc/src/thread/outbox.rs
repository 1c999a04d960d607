//! A thread heap's outbox for one other node: objects of that node freed by this thread,
//! gathered into one chain so they travel to the node's inbox with a single push.

use core::ptr::null_mut;

/// Remote frees gathered per node before the chain is handed over.
pub(super) const OUTBOX_FLUSH: usize = 64;

#[derive(Clone, Copy)]
pub(crate) struct Outbox {
    head: *mut u8,
    tail: *mut u8,
    count: usize,
}

/// A chain taken out of an outbox: newest first, `tail` the oldest, `count` objects.
pub(super) struct Chain {
    pub(super) head: *mut u8,
    pub(super) tail: *mut u8,
    pub(super) count: usize,
}

impl Outbox {
    pub(super) const EMPTY: Outbox = Outbox {
        head: null_mut(),
        tail: null_mut(),
        count: 0,
    };

    /// Adds `object`, whose link `write_link` sets to the current head. True when the outbox
    /// is full and should be flushed.
    pub(super) fn push(
        &mut self,
        object: *mut u8,
        write_link: impl FnOnce(*mut u8, *mut u8),
    ) -> bool {
        write_link(object, self.head);
        if self.count == 0 {
            self.tail = object;
        }
        self.head = object;
        self.count += 1;
        self.count >= OUTBOX_FLUSH
    }

    /// Empties the outbox, returning its chain if it held anything.
    pub(super) fn take(&mut self) -> Option<Chain> {
        let outbox = core::mem::replace(self, Outbox::EMPTY);
        (outbox.count > 0).then_some(Chain {
            head: outbox.head,
            tail: outbox.tail,
            count: outbox.count,
        })
    }
}
