//! The node layer's statistics snapshot: the arena's usage per node, the node heaps' counters
//! per node and class, and the huge pages backing each region, gathered into a [`Stats`].

use super::NodeHeaps;
use crate::size_class::{SizeClass, NUM_CLASSES};
use crate::stats::{NodeStats, Stats};
use core::sync::atomic::Ordering;

impl NodeHeaps {
    /// A snapshot of the allocator's statistics; `threads` live thread heaps.
    pub(crate) fn collect_stats(&self, threads: usize) -> Stats {
        let heaps = self;
        let arena = self.arena;
        let mut stats = Stats::empty();
        stats.node_count = arena.node_count();
        stats.simulated = arena.topology.is_simulated();
        stats.threads = threads;
        stats.limit = arena.budget().limit();
        stats.peak_committed = arena.budget().peak();
        stats.near_limit = arena.tier_budget(false).limit();
        stats.far_limit = arena.tier_budget(true).limit();
        for (index, class) in stats.classes.iter_mut().enumerate() {
            class.size = SizeClass(index as u8).size();
        }
        let mut out_minus_live = [0i64; NUM_CLASSES];
        for node in heaps.nodes() {
            let node_heap = heaps.node(node);
            let usage = arena.usage(node.index());
            let mut out = NodeStats {
                active: usage.active,
                committed: usage.committed,
                mapped: usage.mapped,
                decommitted: usage.decommitted,
                released_in_bags: node_heap.released_in_bags.load(Ordering::Relaxed),
                interleaved: node_heap.interleaved_bytes.load(Ordering::Relaxed),
                remote_frees: node_heap.remote_frees.load(Ordering::Relaxed),
                steals: node_heap.steals.load(Ordering::Relaxed)
                    + arena.steals(node.index()) as u64,
                large_allocs: node_heap.large_allocs.load(Ordering::Relaxed),
                large_frees: node_heap.large_frees.load(Ordering::Relaxed),
                allocated: node_heap.large_bytes.load(Ordering::Relaxed),
                dense_bags: usage.dense_active,
                huge_pages: 0,
                allocs: node_heap.large_allocs.load(Ordering::Relaxed),
                shared: node_heap.ops.counts(usage.span_locks),
                ring_shards: heaps.ring_shards(),
                shard_ring_operations: heaps.shard_operations(node),
                far: arena.topology.is_far(node.index()),
            };
            let mut live_small: i64 = 0;
            heaps.for_each_class_heap(node, |part, size_class, class_heap| {
                let index = size_class.index();
                let class = &mut stats.classes[index];
                let allocs = class_heap.allocs.load(Ordering::Relaxed);
                let frees = class_heap.frees.load(Ordering::Relaxed);
                class.allocs += allocs;
                class.frees += frees;
                out.allocs += allocs;
                let bags = class_heap.bags.load(Ordering::Relaxed);
                let out = class_heap.out_of_bags.load(Ordering::Relaxed);
                let bag_bytes = SizeClass(index as u8).bag_bytes();
                class.bags += bags;
                class.free_in_bags += (bags * bag_bytes).saturating_sub(out * class.size);
                for (_, ring) in heaps.ring_shards_of(node, part, size_class) {
                    class.in_rings += (ring.in_ring.load(Ordering::Relaxed) as isize).max(0)
                        as usize
                        * class.size;
                }
                // Out of the bags minus held by the program, summed over nodes (objects stolen
                // or freed across nodes make one node's figure drift; the sum balances).
                out_minus_live[index] += out as i64 - (allocs as i64 - frees as i64);
                live_small += (allocs as i64 - frees as i64) * class.size as i64;
            });
            // Objects stolen from (or freed to) another node make per-node counts drift; the
            // totals balance.
            out.allocated = (out.allocated as i64 + live_small).max(0) as usize;
            stats.nodes[node.index()] = out;
            stats.allocs += out.large_allocs;
            stats.frees += out.large_frees;
        }
        // Huge pages, by the node whose region holds the mapping.
        crate::os::for_each_huge_mapping(|start, bytes| {
            if let Some(node) = arena.origin_of(start) {
                stats.nodes[node].huge_pages += bytes;
            }
        });
        // The nodes' figures are complete: the totals are their sums.
        stats.sum_nodes();
        (stats.far_allocated, stats.far_committed) = stats
            .nodes()
            .iter()
            .filter(|node| node.far)
            .fold((0, 0), |(allocated, committed), node| {
                (allocated + node.allocated, committed + node.committed)
            });
        self.collect_partition_stats(&mut stats);
        (stats.heaps, stats.heaps_created, stats.heaps_dropped) = self.owned_counts();
        self.collect_owned_stats(&mut stats);
        for (class, out_minus_live) in stats.classes.iter_mut().zip(out_minus_live) {
            class.cached = out_minus_live.max(0) as usize * class.size;
            stats.allocs += class.allocs;
            stats.frees += class.frees;
        }
        stats
    }
}
