//! Cache limits that follow a class's traffic (tcmalloc's slow start, counted in batches).
//!
//! A list starts at its class's base limit (two batches). A class that runs dry after it last
//! overflowed is being used in both directions (a working set that drifts up and down, objects
//! handed back and forth) and would bounce batches between the thread and its node heap: its
//! limit grows by a batch at each such refill, up to [`cache_limit_max`]. A class that overflows
//! [`CUTS_TO_SHRINK`] times without running dry in between mostly frees (a consumer of another
//! thread's objects): its limit shrinks by a batch. What the grown limits add up to is bounded
//! per thread ([`THREAD_GROWN_BYTES`]) and per node ([`NODE_GROWN_BYTES`], tcmalloc's overall
//! thread-cache budget), and an idle class or a flushed heap goes back to the base. A heap lost
//! without its flush (the other threads of a forked parent) keeps its share of the node's budget
//! counted.

use super::free_list::cache_limit_max;
use super::ThreadHeap;
use crate::size_class::SizeClass;
use core::sync::atomic::Ordering;

/// Bytes a thread's grown limits may add to its base limits, summed over classes.
pub(crate) const THREAD_GROWN_BYTES: usize = 4 << 20;

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
        let list = &self.lists[index];
        let mut want = list.limit();
        if self.cuts[index] != 0 {
            want += class.batch();
        }
        want = want.max(list.len() + class.batch());
        self.cuts[index] = 0;
        self.resize(class, want);
    }

    /// After a cut drained `class`'s oldest objects: shrinks the limit after
    /// [`CUTS_TO_SHRINK`] cuts with no refill between.
    pub(super) fn limit_after_cut(&mut self, class: SizeClass) {
        let index = class.index();
        self.cuts[index] += 1;
        if self.cuts[index] == CUTS_TO_SHRINK {
            self.cuts[index] = 1;
            let limit = self.lists[index].limit();
            self.resize(class, limit.saturating_sub(class.batch()));
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
        let base = class.cache_limit();
        let old = self.lists[class.index()].limit();
        if base == 0 || want == old {
            return;
        }
        let size = class.size();
        let room = (THREAD_GROWN_BYTES - self.grown_bytes) / size;
        let new = want.clamp(base, cache_limit_max(class)).min(old + room);
        if new == old {
            return;
        }
        let Some(heaps) = self.heaps() else { return };
        let budget = &heaps.node(self.node).grown_cache_bytes;
        if new > old {
            let add = (new - old) * size;
            if budget.fetch_add(add, Ordering::Relaxed) + add > NODE_GROWN_BYTES {
                budget.fetch_sub(add, Ordering::Relaxed);
                return;
            }
            self.grown_bytes += add;
        } else {
            let sub = (old - new) * size;
            budget.fetch_sub(sub, Ordering::Relaxed);
            self.grown_bytes -= sub;
        }
        self.lists[class.index()].set_limit(class, new);
    }
}
