//! A thread heap's outbox for one other node: objects of that node freed by this thread,
//! gathered into one chain so they travel to the node's inbox with a single push.

use crate::node::Batch;
use core::ptr::null_mut;

/// Remote frees gathered per node before the chain is handed over.
pub(super) const OUTBOX_FLUSH: usize = 64;

/// The chain gathered so far (newest first), empty when `count` is 0.
#[derive(Clone, Copy)]
pub(crate) struct Outbox(Batch);

impl Outbox {
    pub(super) const EMPTY: Outbox = Outbox(Batch {
        head: null_mut(),
        tail: null_mut(),
        count: 0,
    });

    /// Adds `object`, whose link `write_link` sets to the current head. True when the outbox
    /// is full and should be flushed.
    pub(super) fn push(
        &mut self,
        object: *mut u8,
        write_link: impl FnOnce(*mut u8, *mut u8),
    ) -> bool {
        let chain = &mut self.0;
        write_link(object, chain.head);
        if chain.count == 0 {
            chain.tail = object;
        }
        chain.head = object;
        chain.count += 1;
        chain.count >= OUTBOX_FLUSH
    }

    /// True when the outbox is [`Outbox::EMPTY`], field for field (its chain's fresh value).
    pub(super) fn is_empty_value(&self) -> bool {
        super::FreshValue::is_fresh_value(&self.0)
    }

    /// Empties the outbox, returning its chain if it held anything.
    pub(super) fn take(&mut self) -> Option<Batch> {
        let chain = core::mem::replace(self, Outbox::EMPTY).0;
        (chain.count > 0).then_some(chain)
    }
}
