//! Statistics: a snapshot of the allocator, per node and per size class, readable and printable
//! without allocating.
//!
//! Thread heaps count allocations and frees in plain per-class counters and publish them to
//! their node heap on slow paths and at thread exit, so a snapshot lags each running thread by
//! at most one batch per class; `stats()` publishes the calling thread's counters first, and
//! after threads have exited the figures are exact.

use crate::os::options::MAX_RING_SHARDS;
use crate::os::topology::MAX_NODES;
use crate::os::Writer;
use crate::size_class::NUM_CLASSES;

/// One size class's figures, summed over the nodes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassStats {
    /// Bytes per object.
    pub size: usize,
    /// Objects handed out so far (all nodes).
    pub allocs: u64,
    /// Objects freed so far (all nodes).
    pub frees: u64,
    /// Bags currently carved for the class (all nodes).
    pub bags: usize,
    /// Bytes of those bags not handed out: free slots, never-carved slots and the tail.
    pub free_in_bags: usize,
    /// Bytes of objects out of the bags but not held by the program: thread caches, transfer
    /// rings, remote-free chains in transit (lags like `allocs` and `frees`).
    pub cached: usize,
    /// Bytes of objects in the transfer rings (part of `cached`).
    pub in_rings: usize,
}

/// One node's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeStats {
    /// Bytes of live objects allocated by this node's threads (class sizes; large spans whole).
    pub allocated: usize,
    /// Bytes of bags and large spans handed out from this node's region.
    pub active: usize,
    /// Bytes of this region that may be resident: active plus free-but-not-yet-decommitted.
    pub committed: usize,
    /// Bytes of address space the region's frontier has passed.
    pub mapped: usize,
    /// Bytes returned to the OS so far.
    pub decommitted: usize,
    /// Bytes of whole free pages inside bags still in use that are given back to the OS now
    /// (part of `active` and `committed`, but not resident).
    pub released_in_bags: usize,
    /// Objects of this node freed by threads of other nodes (returned through the inbox).
    pub remote_frees: u64,
    /// Times this node's threads took objects or spans from another node.
    pub steals: u64,
    /// Large objects allocated from this node's region so far.
    pub large_allocs: u64,
    /// Large objects of this node's region freed so far.
    pub large_frees: u64,
    /// Bytes of bags in the node's dense pool (objects up to 4 KiB), the memory that may sit on
    /// transparent huge pages.
    pub dense_bags: usize,
    /// Bytes of the node's region backed by transparent huge pages (`AnonHugePages` of the
    /// region's mappings in /proc/self/smaps; 0 where /proc cannot be read).
    pub huge_pages: usize,
    /// Objects (small and large) this node's threads allocated so far (lags as
    /// [`Stats::allocs`]): the base of the shared-operation rates below.
    pub allocs: u64,
    /// Shared-structure operations of this node's heap, so far ([`Stats::write_to`] prints
    /// them per 1 000 allocations).
    pub shared: SharedOpCounts,
    /// Transfer rings per size class on this node (`NODALLOC_RING_SHARDS`).
    pub ring_shards: usize,
    /// Batches pushed and popped through each ring shard so far (the first `ring_shards`
    /// entries): how the node's CPUs share the ring traffic.
    pub shard_ring_operations: [u64; MAX_RING_SHARDS],
}

/// Operations on structures a node's threads share, so far: how often a design makes the
/// node's threads meet, comparable between designs even where few CPUs make the waits
/// themselves rare. Per node in [`NodeStats::shared`], summed over the nodes in
/// [`Stats::shared`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SharedOpCounts {
    /// Times a class lock (one per class, the central bag list's) was taken.
    pub class_locks: u64,
    /// Of [`SharedOpCounts::class_locks`], the times the first try failed and the taker waited.
    pub contended_locks: u64,
    /// Times a span lock of the node's region (its dense and sparse pools) was taken.
    pub span_locks: u64,
    /// Batches pushed to the node's transfer rings.
    pub ring_pushes: u64,
    /// Batches popped from the node's transfer rings (by its threads, and by steals).
    pub ring_pops: u64,
    /// Ring pushes' and pops' compare-and-swap passes that had to start over (another thread
    /// moved the ring's position first).
    pub ring_retries: u64,
    /// Chains of remote frees pushed to the node's inbox (one per outbox hand-over).
    pub inbox_pushes: u64,
    /// Times a thread of the node took its inbox's chains to sort them into bags.
    pub inbox_takes: u64,
    /// Objects taken out of the node's bags one by one (carved or off a bag's free list).
    pub bag_objects_taken: u64,
    /// Objects put back into the node's bags one by one.
    pub bag_objects_returned: u64,
    /// Thread heaps homed on the node at their thread's start.
    pub heaps_attached: u64,
    /// Thread heaps of the node retired at their thread's exit.
    pub heaps_retired: u64,
}

impl SharedOpCounts {
    /// Adds another node's counts to these.
    pub(crate) fn add(&mut self, other: &SharedOpCounts) {
        self.class_locks += other.class_locks;
        self.contended_locks += other.contended_locks;
        self.span_locks += other.span_locks;
        self.ring_pushes += other.ring_pushes;
        self.ring_pops += other.ring_pops;
        self.ring_retries += other.ring_retries;
        self.inbox_pushes += other.inbox_pushes;
        self.inbox_takes += other.inbox_takes;
        self.bag_objects_taken += other.bag_objects_taken;
        self.bag_objects_returned += other.bag_objects_returned;
        self.heaps_attached += other.heaps_attached;
        self.heaps_retired += other.heaps_retired;
    }
}

impl NodeStats {
    /// The share of the dense pool's bags that huge pages back, in percent (0 with no bags).
    pub fn huge_page_percent(&self) -> u64 {
        if self.dense_bags == 0 {
            0
        } else {
            (self.huge_pages.min(self.dense_bags) as u64 * 100) / self.dense_bags as u64
        }
    }
}

/// Partitions a snapshot details: the ones holding the most live bytes.
pub const TOP_PARTITIONS: usize = 16;

/// One call-site partition's figures, summed over the nodes (`NODALLOC_CALLSITE`).
#[derive(Clone, Copy, Debug, Default)]
pub struct PartitionStats {
    /// Its number, `0 ..< P`.
    pub partition: usize,
    /// The first call site seen allocating in it (a return address; 0 when none was recorded,
    /// as for the Rust face's scopes).
    pub site: usize,
    /// Bytes of its live objects (class sizes).
    pub live: usize,
    /// Bags currently carved for it.
    pub bags: usize,
    /// Bags that went back to the region when their last object came back.
    pub reclaimed: u64,
    /// Times a refill took freed objects out of one of its bags whose other objects were still
    /// out (a bag picked apart rather than drained).
    pub picked: u64,
}

impl PartitionStats {
    /// Bags reclaimed whole, in percent of reclaims and pick-aparts (0 with neither).
    pub fn reclaim_percent(&self) -> u64 {
        reclaim_percent(self.reclaimed, self.picked)
    }
}

/// A snapshot of the whole allocator.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Bytes of live objects (see [`NodeStats::allocated`]), all nodes.
    pub allocated: usize,
    /// Bytes of bags and large spans handed out, all nodes.
    pub active: usize,
    /// Bytes committed (in use or free but still resident), all nodes.
    pub committed: usize,
    /// Bytes of address space the regions' frontiers have passed, all nodes.
    pub mapped: usize,
    /// Bytes given back to the OS so far, all nodes.
    pub decommitted: usize,
    /// See [`NodeStats::released_in_bags`].
    pub released_in_bags: usize,
    /// Bytes of the heap on transparent huge pages (see [`NodeStats::huge_pages`]).
    pub huge_pages: usize,
    /// Objects freed by a thread of another node than theirs (sent home), all nodes.
    pub remote_frees: u64,
    /// Batches or objects threads took from other nodes' heaps, all nodes.
    pub steals: u64,
    /// Shared-structure operations, all nodes (see [`NodeStats::shared`]).
    pub shared: SharedOpCounts,
    /// Objects (small and large) allocated so far.
    pub allocs: u64,
    /// Objects (small and large) freed so far.
    pub frees: u64,
    /// Threads with a live heap.
    pub threads: usize,
    /// The hard limit on committed bytes (0: none).
    pub limit: usize,
    /// The most ever committed at once.
    pub peak_committed: usize,
    /// Upkeep passes the maintenance thread made (`NODALLOC_BACKGROUND`; 0 without one).
    pub background_passes: u64,
    /// The maintenance thread's CPU time in ns, as of its last pass or step that prepared
    /// something.
    pub background_cpu_ns: u64,
    /// Chunks (2 MiB) the maintenance thread populated ahead of demand.
    pub background_prepared: usize,
    /// Bags of big classes the maintenance thread carved ahead of demand.
    pub background_bags: u64,
    /// Bytes of free spans the maintenance thread decommitted.
    pub background_decommitted: u64,
    /// Call-site partitions, P (0: the mode is off).
    pub partitions: usize,
    /// Partitions that ever had a bag.
    pub partitions_used: usize,
    /// Bags reclaimed whole, over all partitions (see [`PartitionStats::reclaimed`]).
    pub bags_reclaimed: u64,
    /// Bags picked apart, over all partitions (see [`PartitionStats::picked`]).
    pub bags_picked: u64,
    pub(crate) node_count: usize,
    pub(crate) simulated: bool,
    pub(crate) nodes: [NodeStats; MAX_NODES],
    pub(crate) classes: [ClassStats; NUM_CLASSES],
    pub(crate) top: [PartitionStats; TOP_PARTITIONS],
    pub(crate) top_len: usize,
}

impl Stats {
    pub(crate) fn empty() -> Stats {
        Stats {
            allocated: 0,
            active: 0,
            committed: 0,
            mapped: 0,
            decommitted: 0,
            released_in_bags: 0,
            huge_pages: 0,
            remote_frees: 0,
            steals: 0,
            shared: SharedOpCounts::default(),
            allocs: 0,
            frees: 0,
            threads: 0,
            limit: 0,
            peak_committed: 0,
            background_passes: 0,
            background_cpu_ns: 0,
            background_prepared: 0,
            background_bags: 0,
            background_decommitted: 0,
            partitions: 0,
            partitions_used: 0,
            bags_reclaimed: 0,
            bags_picked: 0,
            node_count: 0,
            simulated: false,
            nodes: [NodeStats::default(); MAX_NODES],
            classes: [ClassStats::default(); NUM_CLASSES],
            top: [PartitionStats::default(); TOP_PARTITIONS],
            top_len: 0,
        }
    }

    /// The partitions with the most live bytes, most first (at most [`TOP_PARTITIONS`]; none
    /// with the mode off).
    pub fn top_partitions(&self) -> &[PartitionStats] {
        &self.top[..self.top_len]
    }

    /// Keeps `partition` among the top ones if it holds more live bytes than the last.
    pub(crate) fn offer_partition(&mut self, partition: PartitionStats) {
        let mut at = self.top_len;
        while at > 0 && self.top[at - 1].live < partition.live {
            at -= 1;
        }
        if at >= TOP_PARTITIONS {
            return;
        }
        let end = (self.top_len + 1).min(TOP_PARTITIONS);
        self.top.copy_within(at..end - 1, at + 1);
        self.top[at] = partition;
        self.top_len = end;
    }

    /// Usable nodes.
    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// Per-node figures, one entry per usable node.
    pub fn nodes(&self) -> &[NodeStats] {
        &self.nodes[..self.node_count]
    }

    /// Per-class figures, one entry per size class.
    pub fn classes(&self) -> &[ClassStats] {
        &self.classes
    }

    /// Writes a human-readable report to a file descriptor, one line at a time, without
    /// allocating. The first line names nodalloc and its version.
    pub fn write_to(&self, fd: i32) {
        let mut w = Writer::new();
        w.str("nodalloc ")
            .str(env!("CARGO_PKG_VERSION"))
            .str(": ")
            .decimal(self.node_count as u64)
            .str(if self.simulated {
                " simulated node(s)"
            } else {
                " node(s)"
            })
            .str(", ")
            .decimal(self.threads as u64)
            .str(" thread(s)\n");
        w.write_to(fd);
        w.clear();
        w.str("  allocated ")
            .size(self.allocated as u64)
            .str(", active ")
            .size(self.active as u64)
            .str(", committed ")
            .size(self.committed as u64)
            .str(", mapped ")
            .size(self.mapped as u64)
            .str(", decommitted ")
            .size(self.decommitted as u64)
            .str(", released in bags ")
            .size(self.released_in_bags as u64)
            .str(", peak committed ")
            .size(self.peak_committed as u64);
        if self.limit != 0 {
            w.str(" (limit ").size(self.limit as u64).str(")");
        }
        w.str("\n  allocs ")
            .decimal(self.allocs)
            .str(", frees ")
            .decimal(self.frees)
            .str(", remote frees ")
            .decimal(self.remote_frees)
            .str(", steals ")
            .decimal(self.steals)
            .str("\n");
        w.write_to(fd);
        for (node, stats) in self.nodes().iter().enumerate() {
            w.clear();
            w.str("  node ")
                .decimal(node as u64)
                .str(": allocated ")
                .size(stats.allocated as u64)
                .str(", active ")
                .size(stats.active as u64)
                .str(", committed ")
                .size(stats.committed as u64)
                .str(", remote frees ")
                .decimal(stats.remote_frees)
                .str(", steals ")
                .decimal(stats.steals)
                .str(", huge pages ")
                .size(stats.huge_pages as u64)
                .str(" (")
                .decimal(stats.huge_page_percent())
                .str("% of ")
                .size(stats.dense_bags as u64)
                .str(" in bags of objects up to 4 KiB)\n");
            w.write_to(fd);
            w.clear();
            write_shared_ops(&mut w, stats);
            w.write_to(fd);
        }
        let (mut free_in_bags, mut cached, mut in_rings) = (0, 0, 0);
        for class in &self.classes {
            free_in_bags += class.free_in_bags;
            cached += class.cached;
            in_rings += class.in_rings;
        }
        w.clear();
        w.str("  small objects: free in bags ")
            .size(free_in_bags as u64)
            .str(", cached ")
            .size(cached as u64)
            .str(" (in rings ")
            .size(in_rings as u64)
            .str(")\n");
        w.write_to(fd);
        if self.background_passes != 0 {
            w.clear();
            w.str("  maintenance thread: ")
                .decimal(self.background_passes)
                .str(" passes, ")
                .decimal(self.background_cpu_ns / 1_000_000)
                .str(" ms of CPU, ")
                .decimal(self.background_prepared as u64)
                .str(" chunks and ")
                .decimal(self.background_bags)
                .str(" bags prepared, ")
                .size(self.background_decommitted)
                .str(" decommitted\n");
            w.write_to(fd);
        }
        if self.partitions != 0 {
            self.write_partitions(fd, &mut w);
        }
        for class in self.classes.iter().filter(|class| class.bags != 0) {
            let live = class.allocs.saturating_sub(class.frees) as usize * class.size;
            w.clear();
            w.str("    class ")
                .size(class.size as u64)
                .str(": bags ")
                .decimal(class.bags as u64)
                .str(", live ")
                .size(live as u64)
                .str(", free in bags ")
                .size(class.free_in_bags as u64)
                .str(", cached ")
                .size(class.cached as u64)
                .str(" (in ring ")
                .size(class.in_rings as u64)
                .str(")\n");
            w.write_to(fd);
        }
    }

    /// The call-site partitions' lines: totals, then the top partitions by live bytes, each
    /// with its call site's symbol (`dladdr`, outside the allocator's paths).
    fn write_partitions(&self, fd: i32, w: &mut Writer) {
        w.clear();
        w.str("  call-site partitions: ")
            .decimal(self.partitions_used as u64)
            .str(" of ")
            .decimal(self.partitions as u64)
            .str(" used, ");
        write_reclaims(w, self.bags_reclaimed, self.bags_picked);
        w.str("\n");
        w.write_to(fd);
        for partition in self.top_partitions() {
            w.clear();
            w.str("    partition ")
                .decimal(partition.partition as u64)
                .str(": live ")
                .size(partition.live as u64)
                .str(", bags ")
                .decimal(partition.bags as u64)
                .str(", ");
            write_reclaims(w, partition.reclaimed, partition.picked);
            if partition.site != 0 {
                w.str(", site ").hex(partition.site);
                crate::os::symbolize(partition.site, w);
            }
            w.str("\n");
            w.write_to(fd);
        }
    }
}

/// A node's shared-structure operations per 1 000 of its allocations, one line.
fn write_shared_ops(w: &mut Writer, node: &NodeStats) {
    let allocs = node.allocs;
    let stats = &node.shared;
    w.str("    shared operations per 1000 allocations: class locks ");
    write_per_thousand(w, stats.class_locks, allocs);
    w.str(" (contended ");
    write_per_thousand(w, stats.contended_locks, allocs);
    w.str("), span locks ");
    write_per_thousand(w, stats.span_locks, allocs);
    w.str(", ring pushes ");
    write_per_thousand(w, stats.ring_pushes, allocs);
    w.str(", ring pops ");
    write_per_thousand(w, stats.ring_pops, allocs);
    w.str(", ring retries ");
    write_per_thousand(w, stats.ring_retries, allocs);
    w.str(", inbox pushes ");
    write_per_thousand(w, stats.inbox_pushes, allocs);
    w.str(", inbox takes ");
    write_per_thousand(w, stats.inbox_takes, allocs);
    w.str(", objects from bags ");
    write_per_thousand(w, stats.bag_objects_taken, allocs);
    w.str(", objects to bags ");
    write_per_thousand(w, stats.bag_objects_returned, allocs);
    w.str(", heaps attached ")
        .decimal(stats.heaps_attached)
        .str(", retired ")
        .decimal(stats.heaps_retired);
    if node.ring_shards > 1 {
        w.str(", ring shards ")
            .decimal(node.ring_shards as u64)
            .str(" (batches");
        for (shard, operations) in node.shard_ring_operations[..node.ring_shards]
            .iter()
            .enumerate()
        {
            w.str(if shard == 0 { " " } else { " / " })
                .decimal(*operations);
        }
        w.str(")");
    }
    w.str("\n");
}

/// `count` per 1 000 `allocs`, with one decimal, rounded down (`-` with no allocation).
fn write_per_thousand(w: &mut Writer, count: u64, allocs: u64) {
    match tenths_per_thousand(count, allocs) {
        Some(tenths) => w.decimal(tenths / 10).str(".").decimal(tenths % 10),
        None => w.str("-"),
    };
}

/// `count` per 1 000 `allocs` in tenths (`None` with no allocation).
fn tenths_per_thousand(count: u64, allocs: u64) -> Option<u64> {
    let tenths = (count as u128 * 10_000).checked_div(allocs as u128)?;
    Some(tenths.min(u64::MAX as u128) as u64)
}

/// `bags reclaimed whole R, picked apart P (S% whole)`.
fn write_reclaims(w: &mut Writer, reclaimed: u64, picked: u64) {
    w.str("bags reclaimed whole ")
        .decimal(reclaimed)
        .str(", picked apart ")
        .decimal(picked)
        .str(" (")
        .decimal(reclaim_percent(reclaimed, picked))
        .str("% whole)");
}

/// Reclaims in percent of reclaims and pick-aparts (0 with neither).
fn reclaim_percent(reclaimed: u64, picked: u64) -> u64 {
    (reclaimed * 100)
        .checked_div(reclaimed + picked)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_partitions_keep_the_most_live_bytes_in_order() {
        let mut stats = Stats::empty();
        let mut state = 12345u64;
        let mut all = Vec::new();
        for partition in 0..200 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let live = (state % 1000) as usize;
            all.push(live);
            stats.offer_partition(PartitionStats {
                partition,
                live,
                ..PartitionStats::default()
            });
        }
        all.sort_unstable_by(|a, b| b.cmp(a));
        let top: Vec<usize> = stats.top_partitions().iter().map(|p| p.live).collect();
        assert_eq!(top, all[..TOP_PARTITIONS].to_vec());
        assert_eq!(reclaim_percent(3, 1), 75);
        assert_eq!(tenths_per_thousand(123, 10_000), Some(123));
        assert_eq!(tenths_per_thousand(1, 3), Some(3333));
        assert_eq!(tenths_per_thousand(5, 0), None);
        assert_eq!(reclaim_percent(0, 0), 0);
    }
}
