//! Upkeep of the node heaps: the periodic pass (rings' grown budgets decayed, rings nobody
//! touched drained into their bags, the inbox sorted, the sweep, the region's due decommits) and the forced flush of `purge`.

use super::*;

impl NodeHeaps {
    /// Periodic upkeep of `node`, run from thread slow paths at most once per decommit delay:
    /// drains rings nobody touched since the last pass, sorts the inbox, and lets the region
    /// decommit what is due. One thread runs it at a time; the others skip.
    ///
    /// A node whose own threads have not run it for a whole extra period (a node without CPUs,
    /// or one whose threads are gone) gets its upkeep from whichever thread notices, so objects
    /// freed to its inbox do not stay there forever.
    pub fn upkeep(&self, node: NodeId, now: u64) {
        let period = upkeep_period(self.arena.decommit.delay_ns);
        self.upkeep_node(node, now, 0, true);
        for other in self.nodes() {
            if other != node {
                self.upkeep_node(other, now, period, true);
            }
        }
    }

    /// Every node's upkeep that is due, each pool's quiet purge, then automatic tiering's pass
    /// (the maintenance thread's pass: bags move on it alone, and only it tells a quiet pool,
    /// which returns its free memory after the decommit delay however far demand stretched it).
    pub(crate) fn upkeep_all(&self, now: u64) {
        for node in self.nodes() {
            // The quiet purge is the pass's one purge of the node's pools (as a busy pool's, it
            // is the upkeep's own), made whether or not the upkeep was due.
            self.upkeep_node(node, now, 0, false);
            self.arena.purge_quiet_node(node.index());
        }
        self.tiering_pass(now);
    }

    /// Runs `node`'s upkeep if it is due by more than `grace` ns, ending with the region's due
    /// decommits when `purge` (the maintenance thread's pass makes its own, `upkeep_all`).
    fn upkeep_node(&self, node: NodeId, now: u64, grace: u64, purge: bool) {
        let node_heap = self.node(node);
        let due = node_heap.next_upkeep.load(Ordering::Relaxed);
        if now < due.saturating_add(grace) {
            return;
        }
        let next = now + upkeep_period(self.arena.decommit.delay_ns);
        if node_heap
            .next_upkeep
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.drain_inbox(node);
        self.for_each_class_heap(node, |part, class, _| {
            for (_, ring) in self.ring_shards_of(node, part, class) {
                ring.decay_budget(class, &node_heap.ring_grown_bytes);
                if ring.is_empty() || ring.touched.swap(false, Ordering::Relaxed) {
                    continue;
                }
                self.empty_ring(node, class, ring);
            }
        });
        self.sweep_node(node, due, false);
        if purge {
            self.arena.purge_node(node.index(), false);
        }
    }

    /// Empties every ring and inbox of every node into the bags and sweeps every bag (for
    /// `purge`).
    pub fn flush_all(&self) {
        for node in self.nodes() {
            self.drain_inbox(node);
            self.for_each_class_heap(node, |part, class, _| {
                for (_, ring) in self.ring_shards_of(node, part, class) {
                    self.empty_ring(node, class, ring);
                }
            });
            self.sweep_node(node, u64::MAX, true);
        }
    }

    /// Returns every batch of one of a class heap's rings to its bags.
    fn empty_ring(&self, node: NodeId, class: SizeClass, ring: &RingShard) {
        while let Some(batch) = ring.pop(&self.node(node).ops) {
            if let Err((object, misuse)) = self.return_to_bags(node, class, batch.head, false) {
                report(object, misuse);
            }
        }
    }
}

/// How often a node's upkeep runs: every decommit delay, but at least every 100 ms (idle caches
/// go back to their bags on this beat) and at most every millisecond.
pub(crate) fn upkeep_period(delay_ns: u64) -> u64 {
    delay_ns.clamp(1_000_000, 100_000_000)
}
