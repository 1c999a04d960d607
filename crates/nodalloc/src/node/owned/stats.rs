//! What first-class heaps hold: per heap, and the statistics' list of heaps.

use super::*;

impl NodeHeaps {
    /// Heap `id`'s node.
    pub(crate) fn owned_node(&self, id: OwnedId) -> usize {
        self.live_record(id, "a node read")
            .node
            .load(Ordering::Relaxed)
    }

    /// What heap `id` holds.
    pub(crate) fn owned_stats(&self, id: OwnedId) -> OwnedStats {
        let record = self.live_record(id, "a statistics read");
        self.owned_figures(id, record)
    }

    /// What heap `id`, whose record is `record`, holds (no check of the handle).
    fn owned_figures(&self, id: OwnedId, record: &OwnedRecord) -> OwnedStats {
        let part = id.partition();
        let mut stats = OwnedStats {
            node: record.node.load(Ordering::Relaxed),
            limit: record.budget.limit(),
            committed: record.budget.charged(),
            peak: record.budget.peak(),
            large_blocks: record.large_blocks.load(Ordering::Relaxed),
            large_bytes: record.large_bytes.load(Ordering::Relaxed),
            ..OwnedStats::default()
        };
        stats.live = stats.large_bytes;
        stats.blocks = stats.large_blocks;
        stats.allocs = record.large_allocs.load(Ordering::Relaxed);
        stats.frees = record.large_frees.load(Ordering::Relaxed);
        for index in 0..NUM_CLASSES {
            let class = SizeClass(index as u8);
            if !self.owned_class_used(part, class) {
                continue;
            }
            let class_heap = &record.classes[index];
            let front = &record.fronts[index];
            let allocs =
                class_heap.allocs.load(Ordering::Relaxed) + front.allocs.load(Ordering::Relaxed);
            let frees =
                class_heap.frees.load(Ordering::Relaxed) + front.frees.load(Ordering::Relaxed);
            let out = allocs.saturating_sub(frees) as usize;
            stats.blocks += out;
            stats.live += out * class.size();
            stats.allocs += allocs;
            stats.frees += frees;
            stats.bags += class_heap.bags.load(Ordering::Relaxed);
        }
        stats
    }

    /// Heap `id`'s name as it was given (cut to [`NAME_BYTES`]), copied into `out`; its length.
    pub(crate) fn owned_name(&self, id: OwnedId, out: &mut [u8; NAME_BYTES]) -> usize {
        let record = self.live_record(id, "a name read");
        // SAFETY: the name is written once, before the slot goes live.
        *out = unsafe { *record.name.get() };
        record.name_len.load(Ordering::Relaxed)
    }

    /// Offers every live heap to the statistics' list of heaps.
    pub(crate) fn collect_owned_stats(&self, stats: &mut crate::stats::Stats) {
        let owned = &self.owned;
        if !owned.is_mapped() {
            return;
        }
        for index in 0..MAX_OWNED {
            let word = owned.slot(index).load(Ordering::Acquire);
            if word & 0xff != LIVE {
                continue;
            }
            let id = OwnedId {
                index: index as u16,
                generation: (word >> 32) as u32,
            };
            // A heap dropped meanwhile is skipped, not reported: the statistics only look.
            let record = owned.record(index);
            let figures = self.owned_figures(id, record);
            let mut line = crate::stats::HeapLine {
                index,
                generation: id.generation,
                node: figures.node,
                live: figures.live,
                committed: figures.committed,
                limit: figures.limit,
                ..Default::default()
            };
            line.name_len = record.name_len.load(Ordering::Relaxed).min(NAME_BYTES);
            // SAFETY: the name is written before the slot goes live, and only then.
            line.name = unsafe { *record.name.get() };
            if owned.slot(index).load(Ordering::Acquire) == word {
                stats.offer_heap(line);
            }
        }
    }

    /// Heaps alive now, and created and dropped so far.
    pub(crate) fn owned_counts(&self) -> (usize, u64, u64) {
        let owned = &self.owned;
        (
            owned.live.load(Ordering::Relaxed),
            owned.created.load(Ordering::Relaxed),
            owned.dropped.load(Ordering::Relaxed),
        )
    }
}
