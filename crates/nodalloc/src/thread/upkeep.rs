//! The thread heap's share of upkeep, run from its slow paths: idle classes flushed, counters
//! published, the node heap's own upkeep, re-homing when the thread moved to another node, and
//! the flush and retirement at thread exit.

use super::{HeapState, ThreadHeap};
use crate::node::{HomeView, NodeHeaps, Partition, PartitionView};
use crate::size_class::{SizeClass, NUM_CLASSES};

// One bit per class in `ThreadHeap::published`.
const _: () = assert!(NUM_CLASSES <= 128);

impl ThreadHeap {
    /// Runs at most once per upkeep period, from slow paths: returns the caches of classes
    /// this thread has not used since the previous pass (so a phase's leftovers do not pin bags
    /// forever), then lets the node heap run its own upkeep (unless the maintenance thread
    /// runs it).
    pub fn upkeep(&mut self) {
        let Some(heaps) = self.heaps() else { return };
        if self.state != HeapState::Active {
            return;
        }
        let now = crate::os::monotonic_ns();
        if now < self.next_upkeep {
            return;
        }
        let period = heaps.upkeep_period();
        self.next_upkeep = now + period;
        self.holds_left = super::HOLDS_PER_UPKEEP;
        // Caches exited threads left that no thread took for a period go home.
        super::pool::drop_stale(now.saturating_sub(period));
        for index in 0..NUM_CLASSES {
            let list = &self.lists[index];
            // Idle: nothing since its last publication, and no publication since the last
            // pass (a cut or a park publishes, then runs the upkeep if due).
            let published = self.published & (1 << index) != 0;
            let held = list.len() + self.stash[index].count + self.runs[index].left as usize;
            if list.is_idle() && held > 0 && !published {
                self.return_list(heaps, index);
            }
        }
        self.kept_large_upkeep();
        self.partition_upkeep(heaps, true);
        self.publish_all();
        self.published = 0;
        self.flush_outboxes();
        // With a maintenance thread, the node heaps' upkeep (and its `madvise` calls) is its.
        if !heaps.releases_deferred() {
            heaps.upkeep(self.node, now);
        }
        self.check_home();
    }

    /// Re-homes the heap if the thread now runs on another node (see `follow_cpu`). Cheap: one
    /// `sched_getcpu` (a vDSO or rseq read).
    pub fn check_home(&mut self) {
        if self.follow_cpu && self.state == HeapState::Active {
            if let Some(heaps) = self.heaps() {
                self.rehome(heaps);
            }
        }
    }

    /// Moves the heap to the node of the CPU the thread runs on now, returning every cached
    /// object to its old node first (objects never change node). A thread nodalloc bound only
    /// runs outside its home when the program re-pinned it; from then on the mask is the
    /// program's, not nodalloc's.
    fn rehome(&mut self, heaps: &'static NodeHeaps) {
        let Some(cpu) = crate::os::current_cpu() else {
            return;
        };
        let node = heaps.node_of_cpu(cpu);
        if node != self.node && node.index() < heaps.node_count() {
            self.flush();
            self.attach(heaps, node);
            self.bound_mask = None;
            self.watch_cpu();
        }
    }

    /// Publishes the class's alloc/free counts to its node heap's statistics.
    pub(super) fn publish(&mut self, class: SizeClass) {
        let heaps = self.heaps();
        if self.lists[class.index()].is_idle() {
            return;
        }
        self.lean_before_publish(class);
        let list = &mut self.lists[class.index()];
        let (allocs, frees) = list.take_counts();
        self.lean_after_publish(class);
        self.published |= 1 << class.index();
        if let Some(heaps) = heaps {
            heaps.publish_counts(self.node, Partition::DEFAULT, class, allocs, frees);
        }
    }

    /// Publishes every class's counts and sends every outbox (whose frees are counted when
    /// their node sorts them): before a statistics snapshot.
    pub(crate) fn publish_all(&mut self) {
        for class in 0..NUM_CLASSES {
            self.publish(SizeClass(class as u8));
        }
        self.publish_kept_large();
        if let Some(heaps) = self.heaps() {
            self.partition_upkeep(heaps, false);
        }
        self.flush_outboxes();
    }

    /// Returns every cached object to its bags and every outbox to its node; the heap stays
    /// usable (used by `purge` and by re-homing).
    pub(crate) fn flush(&mut self) {
        self.publish_all();
        let Some(heaps) = self.heaps() else { return };
        for index in 0..NUM_CLASSES {
            self.return_list(heaps, index);
        }
        self.partition_flush(heaps);
        self.release_kept_large();
        // Every list is empty: nothing stolen is cached any more.
        self.foreign = false;
    }

    /// Empties one class's list (and lean mode's stash) into its bags.
    fn return_list(&mut self, heaps: &'static NodeHeaps, index: usize) {
        if !self.lists[index].is_configured() {
            // Never used (see `cache.rs`): nothing to return, and its page left untouched. A
            // class's run and stash are only ever filled after its list is configured.
            debug_assert!(self.runs[index].left == 0 && self.stash[index].count == 0);
            return;
        }
        let batch = self.lists[index].take_all(self.secure);
        let class = SizeClass(index as u8);
        self.reset_limit(class);
        self.give_back(heaps, Partition::DEFAULT, class, batch, true);
        // The run and the stash are written only when they hold objects: their arrays lie on
        // pages of their own, which a heap whose classes never had a run or a stash leaves
        // untouched (written empty, every thread's exit made two more pages resident).
        if self.runs[index].left != 0 {
            let run = core::mem::replace(&mut self.runs[index], crate::node::Run::EMPTY);
            heaps.return_run(class, run);
        }
        if self.stash[index].count != 0 {
            let stash = core::mem::replace(&mut self.stash[index], crate::node::Batch::EMPTY);
            self.give_back(heaps, Partition::DEFAULT, class, stash, true);
        }
    }

    /// True when this heap's caches may wait in the pool for the next thread at its thread's
    /// exit (see `pool.rs`): attached, not secure, without call-site partitions, holding only
    /// its own node's objects, and no hard limit (under which no memory waits for demand).
    pub(crate) fn can_keep_caches(&self) -> bool {
        self.state == HeapState::Active
            && !self.secure
            && self.partitions == 0
            && !self.foreign
            && self.heaps().is_some_and(|heaps| !heaps.is_limited())
    }

    /// Thread exit with the caches kept for the next thread that takes this heap from the pool
    /// (`now`: when): the counts are published and the outboxes sent, the thread counts as
    /// gone, and everything that was the thread's own (binding, CPU word, call site) is
    /// forgotten. The heap is fresh again, with caches: the next thread's attach keeps them
    /// if it is homed on their node. Nothing reaches the lists meanwhile: no thread holds the
    /// heap, and its empty range refuses every pop.
    pub(crate) fn park_caches(&mut self, now: u64) {
        debug_assert!(self.can_keep_caches());
        self.publish_all();
        if let Some(heaps) = self.heaps() {
            heaps.count_heap_retired(self.node);
        }
        self.state = HeapState::Fresh;
        self.kept_since = now.max(1);
        self.home = HomeView::NONE;
        self.lean_home = HomeView::NONE;
        self.part_fast = false;
        self.part_view = PartitionView::NONE;
        (self.arena_base, self.arena_words) = (0, 0);
        self.bind_base = crate::bind::BindBase::Current;
        self.bound_mask = None;
        self.follow_cpu = false;
        self.cpu_word = core::ptr::null();
        self.cpu_seen = 0;
        self.call_site = 0;
        self.scope = 0;
        self.untouched = false;
    }

    /// When the caches this pooled heap keeps were left (0: it keeps none).
    pub(crate) fn kept_since(&self) -> u64 {
        self.kept_since
    }

    /// Returns the caches an exited thread left in this heap to their node (they went stale in
    /// the pool, or the next thread is homed elsewhere). The heap is then as fresh as a new one
    /// but for its attach hook.
    pub(crate) fn drop_kept_caches(&mut self) {
        if self.kept_since == 0 {
            return;
        }
        self.kept_since = 0;
        super::pool::release_kept();
        self.flush();
    }

    /// Thread exit: flush everything and serve later calls without caching.
    pub(crate) fn retire(&mut self) {
        if self.state == HeapState::Active {
            self.flush();
            self.drop_partition_cache();
            if let Some(heaps) = self.heaps() {
                heaps.count_heap_retired(self.node);
            }
            self.state = HeapState::Retired;
            // Every free now fails the region check and takes the slow path.
            self.home = HomeView::NONE;
            self.lean_home = HomeView::NONE;
            self.part_fast = false;
            self.part_view = PartitionView::NONE;
        }
    }
}
