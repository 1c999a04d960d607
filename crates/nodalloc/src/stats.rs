//! Statistics: a snapshot of the allocator, per node and per size class, readable and printable
//! without allocating.
//!
//! Thread heaps count allocations and frees in plain per-class counters and publish them to
//! their node heap on slow paths and at thread exit, so a snapshot lags each running thread by
//! at most one batch per class; `stats()` publishes the calling thread's counters first, and
//! after threads have exited the figures are exact.

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
    pub(crate) node_count: usize,
    pub(crate) simulated: bool,
    pub(crate) nodes: [NodeStats; MAX_NODES],
    pub(crate) classes: [ClassStats; NUM_CLASSES],
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
            allocs: 0,
            frees: 0,
            threads: 0,
            limit: 0,
            peak_committed: 0,
            node_count: 0,
            simulated: false,
            nodes: [NodeStats::default(); MAX_NODES],
            classes: [ClassStats::default(); NUM_CLASSES],
        }
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
}
