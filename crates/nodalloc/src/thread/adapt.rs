//! Cache limits that follow a class's traffic (tcmalloc's slow start, counted in batches).
//!
//! A list starts at its class's base limit (two batches). A class that has overflowed since its
//! limit was last reset and then runs dry is being used in both directions (a working set that
//! drifts up and down, bursts of allocations freed again, objects handed back and forth) and
//! would bounce batches between the thread and its node heap: its limit grows by a batch at
//! every refill from then on, up to [`cache_limit_max`] (tcmalloc's thread caches grow at every
//! fetch). A class that overflows [`CUTS_TO_SHRINK`] times without running dry in between mostly
//! frees (a consumer of another thread's objects): its limit shrinks by a batch. A producer,
//! which never overflows, never grows. What the grown limits add up to is bounded
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

/// Set in a list's count of cuts (beside the count, which stays below it) once the list has
/// been cut since its limit was last reset: its refills grow the limit from then on.
const CUT_SINCE_RESET: u8 = 0x80;

/// The count of cuts since the last refill, without the flag.
fn cuts_since_refill(cuts: u8) -> u8 {
    cuts & !CUT_SINCE_RESET
}

impl ThreadHeap {
    /// After a refill installed a batch in `class`'s empty list: grows the limit when the list
    /// has overflowed since its limit was last reset, and makes room for a refill larger than
    /// the list's drain (a batch another thread's grown list cut).
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

/// The limit a list of `class` should have after a refill (`cuts`: its cuts since the last
/// refill, whose count is reset here, and whether it was cut since its limit was reset).
///
/// Growing only at the first refill after a cut (the rule before) could not keep up with a
/// thread that allocates a burst of a thousand blocks and frees them all: one batch more per
/// burst, and a batch less per four cuts of its frees, so each burst went through the node's
/// ring (glibc-simple's bursts: 3.6 ring pushes per 1 000 allocations, 1.6× tcmalloc's time).
pub(super) fn want_after_refill(list: &FreeList, cuts: &mut u8, class: SizeClass) -> usize {
    let mut want = list.limit();
    if *cuts != 0 {
        want += class.batch();
    }
    *cuts &= CUT_SINCE_RESET;
    want.max(list.len() + class.batch())
}

/// After a cut: the smaller limit the list should have, when this is the
/// [`CUTS_TO_SHRINK`]th cut with no refill between.
pub(super) fn want_after_cut(list: &FreeList, cuts: &mut u8, class: SizeClass) -> Option<usize> {
    let count = cuts_since_refill(*cuts) + 1;
    if count < CUTS_TO_SHRINK {
        *cuts = CUT_SINCE_RESET | count;
        return None;
    }
    *cuts = CUT_SINCE_RESET | 1;
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
