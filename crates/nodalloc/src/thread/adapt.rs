//! Cache limits that follow a class's traffic (tcmalloc's slow start, counted in batches).
//!
//! A list starts at its class's base limit (two batches). A class that runs dry after it last
//! overflowed is being used in both directions (a working set that drifts up and down, objects
//! handed back and forth) and would bounce batches between the thread and its node heap: its
//! limit grows by a batch at each such refill, up to [`cache_limit_max`]. A class that overflows
//! [`CUTS_TO_SHRINK`] times without running dry in between mostly frees (a consumer of another
//! thread's objects): its limit shrinks by a batch. What the grown limits add up to is bounded
//! per thread ([`THREAD_GROWN_BYTES`]) and per node ([`NODE_GROWN_BYTES`], tcmalloc's overall
//! thread-cache budget), and an idle class or a flushed heap goes back to the base. The lists of
//! the partition cache (`partition.rs`) adapt the same way, each with its own count of cuts, and
//! share the thread's budget; an evicted list goes back to the base. A heap lost
//! without its flush (the other threads of a forked parent) keeps its share of the node's budget
//! counted.

use super::cache::{cache_limit_max, FreeList};
use super::ThreadHeap;
use crate::node::{charge_within, NodeHeaps, NodeId};
use crate::size_class::SizeClass;
use core::sync::atomic::Ordering;

/// Bytes a thread's grown limits may add to its base limits, summed over classes. Half the
/// node's budget: two busy threads of a node may use it all (at 4 MiB, the latency case's
/// threads ran out of it with most of their classes at their base limits).
pub(crate) const THREAD_GROWN_BYTES: usize = 16 << 20;

/// Bytes the grown limits of all threads of one node may add together.
pub(crate) const NODE_GROWN_BYTES: usize = 32 << 20;

/// Cuts in a row, with no refill between, after which a grown limit shrinks by a batch (a
/// burst of frees cuts a grown list a few times; only a longer run of them says the thread
/// has stopped allocating the class).
pub(super) const CUTS_TO_SHRINK: u8 = 4;

impl ThreadHeap {
    /// After a refill installed a batch in `class`'s empty list: grows the limit when the list
    /// overflowed since its previous refill, and makes room for a refill larger than the
    /// list's drain (a batch another thread's grown list cut).
    pub(super) fn limit_after_refill(&mut self, class: SizeClass) {
        let index = class.index();
        let want = want_after_refill(&self.lists[index], &mut self.cuts[index], class);
        self.resize(class, want);
    }

    /// After a cut drained `class`'s oldest objects: shrinks the limit after
    /// [`CUTS_TO_SHRINK`] cuts with no refill between.
    pub(super) fn limit_after_cut(&mut self, class: SizeClass) {
        let index = class.index();
        if let Some(want) = want_after_cut(&self.lists[index], &mut self.cuts[index], class) {
            self.resize(class, want);
        }
    }

    /// Back to the class's base limit (an idle class, a flushed heap). The list must be unarmed.
    pub(super) fn reset_limit(&mut self, class: SizeClass) {
        self.cuts[class.index()] = 0;
        self.resize(class, class.cache_limit());
    }

    /// Sets `class`'s limit as close to `want` as its bounds and the thread's budget allow (a
    /// class threads do not cache keeps its zero limit).
    fn resize(&mut self, class: SizeClass, want: usize) {
        let heaps = self.heaps();
        let node = self.node;
        resize_list(
            &mut self.grown_bytes,
            heaps,
            node,
            &mut self.lists[class.index()],
            class,
            want,
        );
    }
}

/// The limit a list of `class` should have after a refill (its cuts since the last refill in
/// `cuts`, reset here).
pub(super) fn want_after_refill(list: &FreeList, cuts: &mut u8, class: SizeClass) -> usize {
    let mut want = list.limit();
    if *cuts != 0 {
        want += class.batch();
    }
    *cuts = 0;
    want.max(list.len() + class.batch())
}

/// After a cut: the smaller limit the list should have, when this is the
/// [`CUTS_TO_SHRINK`]th cut with no refill between.
pub(super) fn want_after_cut(list: &FreeList, cuts: &mut u8, class: SizeClass) -> Option<usize> {
    *cuts += 1;
    if *cuts < CUTS_TO_SHRINK {
        return None;
    }
    *cuts = 1;
    Some(list.limit().saturating_sub(class.batch()))
}

/// Sets the limit of `list` (of `class`, in a heap homed on `node` whose grown limits add
/// `grown_bytes`) as close to `want` as its bounds and the thread's and node's budgets allow.
/// The list must be unarmed.
pub(super) fn resize_list(
    grown_bytes: &mut usize,
    heaps: Option<&NodeHeaps>,
    node: NodeId,
    list: &mut FreeList,
    class: SizeClass,
    want: usize,
) {
    let base = class.cache_limit();
    let old = list.limit();
    if base == 0 || want == old {
        return;
    }
    let size = class.size();
    let room = (THREAD_GROWN_BYTES - *grown_bytes) / size;
    let new = want.clamp(base, cache_limit_max(class)).min(old + room);
    if new == old {
        return;
    }
    let Some(heaps) = heaps else { return };
    let budget = &heaps.node(node).grown_cache_bytes;
    if new > old {
        let add = (new - old) * size;
        if !charge_within(budget, add, NODE_GROWN_BYTES) {
            return;
        }
        *grown_bytes += add;
    } else {
        let sub = (old - new) * size;
        budget.fetch_sub(sub, Ordering::Relaxed);
        *grown_bytes -= sub;
    }
    list.set_limit(class, new);
}
