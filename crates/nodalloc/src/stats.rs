//! Statistics: a snapshot of the allocator, per node and per size class, readable and printable
//! without allocating.
//!
//! Thread heaps count allocations and frees in plain per-class counters and publish them to
//! their node heap on slow paths and at thread exit, so a snapshot lags each running thread by
//! at most one batch per class; `stats()` publishes the calling thread's counters first, and
//! after threads have exited the figures are exact.
//!
//! The figures each node keeps and the whole allocator sums are declared once, in two tables
//! (`node_summed_fields` and `shared_op_fields`, after mimalloc's `MI_STAT_FIELDS`): the
//! fields of [`NodeStats`], [`Stats`] and [`SharedOpCounts`], the sums and the report's lines
//! for them are generated from the tables' rows. The other figures are hand-written fields.
//! `node/stats.rs` fills a snapshot in.

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

/// The statistics every node keeps and [`Stats`] sums over the nodes, one row each: the only
/// place such a statistic is declared. Each row generates the [`NodeStats`] field (documented
/// by the row's doc comment), the same-named [`Stats`] field (documented by the row's
/// description of the total, "summed over the nodes"), its zero in `Stats::empty`, its term in
/// `Stats::sum_nodes` and its place in the report ([`Stats::write_to`]). Adding such a
/// statistic is one row here, plus the line of `collect_stats` (`node/stats.rs`) that fills in
/// each node's value.
///
/// A row: the doc comment (per node); `name: type` (`usize` or `u64`); the description of the
/// total; how the report writes the value (a [`Shown`] variant), its label, and the report
/// lines it is printed on (a list of [`ReportLine`]s, `[]` for none). A line prints its fields
/// in table order, so `huge_pages` stays the last one on `Node`: the hand-written text after it
/// (`(P% of … in bags of objects up to 4 KiB)`) qualifies it.
///
/// What goes elsewhere: the shared-structure operations, summed too, in `shared_op_fields`;
/// per-node figures that are not summed (`large_allocs`, `dense_bags`, `ring_shards`, …) as
/// hand-written fields of [`NodeStats`]; whole-allocator figures that are not the nodes' sums
/// (`allocs` and `frees`, counted per class; `threads`, `limit`, `peak_committed`,
/// `background_*`, the partitions' figures) as hand-written fields of [`Stats`].
///
/// `node_summed_fields! { generator! { input } }` expands to `generator! { [rows] input }`;
/// the generators follow, and the unit tests read the rows the same way, so they cover a new
/// row without being told.
macro_rules! node_summed_fields {
    ($generator:ident ! { $($input:tt)* }) => {
        $generator! {
            [
                /// Bytes of live objects allocated by this node's threads (class sizes; large
                /// spans whole).
                allocated: usize, "Bytes of live objects",
                    Bytes "allocated" [TotalBytes, Node];
                /// Bytes of bags and large spans handed out from this node's region.
                active: usize, "Bytes of bags and large spans handed out",
                    Bytes "active" [TotalBytes, Node];
                /// Bytes of this region that may be resident: active plus
                /// free-but-not-yet-decommitted.
                committed: usize, "Bytes committed (in use or free but still resident)",
                    Bytes "committed" [TotalBytes, Node];
                /// Bytes of address space the region's frontier has passed.
                mapped: usize, "Bytes of address space the regions' frontiers have passed",
                    Bytes "mapped" [TotalBytes];
                /// Bytes returned to the OS so far.
                decommitted: usize, "Bytes given back to the OS so far",
                    Bytes "decommitted" [TotalBytes];
                /// Bytes of whole free pages inside bags still in use that are given back to the
                /// OS now (part of `active` and `committed`, but not resident).
                released_in_bags: usize,
                    "Bytes of whole free pages inside bags still in use that are given back to \
                     the OS now (part of `active` and `committed`, but not resident)",
                    Bytes "released in bags" [TotalBytes];
                /// Objects of this node freed by threads of other nodes (returned through the
                /// inbox).
                remote_frees: u64,
                    "Objects freed by a thread of another node than theirs (sent home)",
                    Count "remote frees" [TotalObjects, Node];
                /// Times this node's threads took objects or spans from another node.
                steals: u64, "Batches or objects threads took from other nodes' heaps",
                    Count "steals" [TotalObjects, Node];
                /// Bytes of live large blocks of this node's region whose pages are interleaved
                /// with its far nodes (`NODALLOC_INTERLEAVE`).
                interleaved: usize,
                    "Bytes of live large blocks interleaved with the far nodes",
                    Bytes "interleaved" [TotalBytes];
                /// Bytes of the node's region backed by transparent huge pages (`AnonHugePages`
                /// of the region's mappings in /proc/self/smaps; 0 where /proc cannot be read).
                huge_pages: usize, "Bytes of the heap on transparent huge pages",
                    Bytes "huge pages" [Node];
            ]
            $($input)*
        }
    };
}

/// The operations on shared structures each node counts, one row each: the only place such a
/// count is declared. Each row generates the [`SharedOpCounts`] field (documented by the row's
/// doc comment), its term in `SharedOpCounts::add` (so in [`Stats::shared`], the nodes' sum)
/// and its place on each node's `shared operations` line of the report. Adding such a count is
/// one row here, plus the line of `SharedOps::counts` (`node/mod.rs`) that reads it.
///
/// A row: the doc comment; the name; how the report writes the value (a [`Shown`] variant,
/// rates per 1 000 of the node's allocations) and the text before it on the line, its
/// punctuation included. All counts are `u64`.
///
/// `shared_op_fields! { generator! { input } }` expands to `generator! { [rows] input }`, as
/// `node_summed_fields` does.
macro_rules! shared_op_fields {
    ($generator:ident ! { $($input:tt)* }) => {
        $generator! {
            [
                /// Times a class lock (one per class, the central bag list's) was taken.
                class_locks: PerThousand "class locks ";
                /// Of [`SharedOpCounts::class_locks`], the times the first try failed and the
                /// taker waited.
                contended_locks: PerThousand " (contended ";
                /// Times a span lock of the node's region (its dense and sparse pools) was taken.
                span_locks: PerThousand "), span locks ";
                /// Batches pushed to the node's transfer rings.
                ring_pushes: PerThousand ", ring pushes ";
                /// Batches popped from the node's transfer rings (by its threads, and by steals).
                ring_pops: PerThousand ", ring pops ";
                /// Ring pushes' and pops' compare-and-swap passes that had to start over (another
                /// thread moved the ring's position first).
                ring_retries: PerThousand ", ring retries ";
                /// Chains of remote frees pushed to the node's inbox (one per outbox hand-over).
                inbox_pushes: PerThousand ", inbox pushes ";
                /// Times a thread of the node took its inbox's chains to sort them into bags.
                inbox_takes: PerThousand ", inbox takes ";
                /// Objects taken out of the node's bags: carved, or free objects taken again
                /// by their bits.
                bag_objects_taken: PerThousand ", objects from bags ";
                /// Of [`SharedOpCounts::bag_objects_taken`], the free objects taken again (the
                /// rest were carved for the first time).
                bag_objects_reused: PerThousand " (reused ";
                /// Objects put back into the node's bags one by one.
                bag_objects_returned: PerThousand "), objects to bags ";
                /// Thread heaps homed on the node at their thread's start.
                heaps_attached: Count ", heaps attached ";
                /// Thread heaps of the node retired at their thread's exit.
                heaps_retired: Count ", retired ";
            ]
            $($input)*
        }
    };
}

/// Generates [`NodeStats`]: the rows of `node_summed_fields`, then the hand-written fields;
/// with the report's description of the summed fields, `SUMMED_FIELDS`.
macro_rules! node_stats_struct {
    (
        [$(
            $(#[$doc:meta])*
            $name:ident: $ty:ty, $total:literal, $shown:ident $label:literal [$($line:ident),*];
        )*]
        $(#[$attribute:meta])*
        pub struct NodeStats { $($fields:tt)* }
    ) => {
        $(#[$attribute])*
        pub struct NodeStats {
            $($(#[$doc])* pub $name: $ty,)*
            $($fields)*
        }

        impl NodeStats {
            /// The summed fields' values, in table order (that of `SUMMED_FIELDS`).
            fn summed_values(&self) -> [u64; SUMMED_FIELDS.len()] {
                [$(self.$name as u64),*]
            }
        }

        /// How the report prints each summed field, in table order.
        const SUMMED_FIELDS: [SummedField; [$(stringify!($name)),*].len()] = [$(
            SummedField { label: $label, shown: Shown::$shown, lines: &[$(ReportLine::$line),*] },
        )*];
    };
}

/// Generates [`Stats`]: the rows of `node_summed_fields` (each the sum of the nodes'), then the
/// hand-written fields, each with its value in an empty snapshot after `=`; with
/// `Stats::empty` and `Stats::sum_nodes`.
macro_rules! stats_struct {
    (
        [$(
            $(#[$doc:meta])*
            $name:ident: $ty:ty, $total:literal, $shown:ident $label:literal [$($line:ident),*];
        )*]
        $(#[$attribute:meta])*
        pub struct Stats {
            $($(#[$field_doc:meta])* $vis:vis $field:ident: $field_ty:ty = $empty:expr,)*
        }
    ) => {
        $(#[$attribute])*
        pub struct Stats {
            $(
                #[doc = concat!(
                    $total, ", summed over the nodes (see [`NodeStats::", stringify!($name), "`])."
                )]
                pub $name: $ty,
            )*
            $($(#[$field_doc])* $vis $field: $field_ty,)*
        }

        impl Stats {
            /// A snapshot of nothing: no nodes, every figure zero.
            pub(crate) fn empty() -> Stats {
                Stats {
                    $($name: 0,)*
                    $($field: $empty,)*
                }
            }

            /// Sets each summed field, and [`Stats::shared`], to its sum over [`Stats::nodes`].
            pub(crate) fn sum_nodes(&mut self) {
                $(self.$name = 0;)*
                self.shared = SharedOpCounts::default();
                for node in &self.nodes[..self.node_count] {
                    $(self.$name += node.$name;)*
                    self.shared.add(&node.shared);
                }
            }

            /// The summed fields' values, in table order (that of `SUMMED_FIELDS`).
            fn summed_values(&self) -> [u64; SUMMED_FIELDS.len()] {
                [$(self.$name as u64),*]
            }
        }
    };
}

/// Generates [`SharedOpCounts`] from the rows of `shared_op_fields`, with its `add` and the
/// report's description of its fields, `SHARED_OP_FIELDS`.
macro_rules! shared_op_counts_struct {
    (
        [$($(#[$doc:meta])* $name:ident: $shown:ident $before:literal;)*]
        $(#[$attribute:meta])*
        pub struct SharedOpCounts;
    ) => {
        $(#[$attribute])*
        pub struct SharedOpCounts {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl SharedOpCounts {
            /// Adds another node's counts to these.
            pub(crate) fn add(&mut self, other: &SharedOpCounts) {
                $(self.$name += other.$name;)*
            }

            /// The counts, in table order (that of `SHARED_OP_FIELDS`).
            fn values(&self) -> [u64; SHARED_OP_FIELDS.len()] {
                [$(self.$name),*]
            }
        }

        /// How the report prints each count, in table order.
        const SHARED_OP_FIELDS: [SharedOpField; [$(stringify!($name)),*].len()] = [$(
            SharedOpField { before: $before, shown: Shown::$shown },
        )*];
    };
}

/// How the report writes a value.
#[derive(Clone, Copy)]
enum Shown {
    /// Bytes, with a binary unit (`12.5 MiB`).
    Bytes,
    /// The number as it is.
    Count,
    /// Per 1 000 allocations of the same node (or of all nodes), with one decimal.
    PerThousand,
}

/// The report's lines that print summed fields (the rows of `node_summed_fields` name them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ReportLine {
    /// The totals' bytes: `  allocated …, peak committed …`.
    TotalBytes,
    /// The totals' objects: `  allocs …, frees …, remote frees …`.
    TotalObjects,
    /// Each node's first line: `  node N: allocated …`.
    Node,
}

/// How the report prints a summed field: `label value`, on each of `lines`.
struct SummedField {
    label: &'static str,
    shown: Shown,
    lines: &'static [ReportLine],
}

/// How the report prints a shared-operation count: `before` then the value.
struct SharedOpField {
    before: &'static str,
    shown: Shown,
}

node_summed_fields! {
    node_stats_struct! {
        /// One node's figures. The ones [`Stats`] sums over the nodes, into its fields of the
        /// same names, come first.
        #[derive(Clone, Copy, Debug, Default)]
        pub struct NodeStats {
            /// Large objects allocated from this node's region so far.
            pub large_allocs: u64,
            /// Large objects of this node's region freed so far.
            pub large_frees: u64,
            /// Bytes of bags in the node's dense pool (objects up to 4 KiB), the memory that may
            /// sit on transparent huge pages.
            pub dense_bags: usize,
            /// Objects (small and large) this node's threads allocated so far (lags as
            /// [`Stats::allocs`]): the base of the shared-operation rates below.
            pub allocs: u64,
            /// Shared-structure operations of this node's heap, so far ([`Stats::write_to`]
            /// prints them per 1 000 allocations).
            pub shared: SharedOpCounts,
            /// Transfer rings per size class on this node (`NODALLOC_RING_SHARDS`).
            pub ring_shards: usize,
            /// Batches pushed and popped through each ring shard so far (the first
            /// `ring_shards` entries): how the node's CPUs share the ring traffic.
            pub shard_ring_operations: [u64; MAX_RING_SHARDS],
            /// The node is far memory (see [`crate::Topology::is_far`]).
            pub far: bool,
        }
    }
}

shared_op_fields! {
    shared_op_counts_struct! {
        /// Operations on structures a node's threads share, so far: how often a design makes the
        /// node's threads meet, comparable between designs even where few CPUs make the waits
        /// themselves rare. Per node in [`NodeStats::shared`], summed over the nodes in
        /// [`Stats::shared`].
        #[derive(Clone, Copy, Debug, Default)]
        pub struct SharedOpCounts;
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

/// First-class heaps the statistics list, most live bytes first.
pub const TOP_HEAPS: usize = 8;

/// One first-class heap as the statistics list it (see [`Stats::top_heaps`]).
#[derive(Clone, Copy, Debug)]
pub struct HeapLine {
    /// Its slot and generation (as `nodalloc::HeapId` gives them).
    pub index: usize,
    /// The slot's generation when the heap was created.
    pub generation: u32,
    /// Its node.
    pub node: usize,
    /// Bytes of its blocks the program holds.
    pub live: usize,
    /// Bytes of its bags and large blocks.
    pub committed: usize,
    /// Its limit, 0 for none.
    pub limit: usize,
    /// Its name's first bytes (`name_len` of them).
    pub name: [u8; crate::node::NAME_BYTES],
    /// Bytes of `name` in use.
    pub name_len: usize,
}

impl Default for HeapLine {
    fn default() -> HeapLine {
        HeapLine {
            index: 0,
            generation: 0,
            node: 0,
            live: 0,
            committed: 0,
            limit: 0,
            name: [0; crate::node::NAME_BYTES],
            name_len: 0,
        }
    }
}

impl HeapLine {
    /// Its name as given (cut to 40 bytes; empty for none).
    pub fn name(&self) -> &[u8] {
        &self.name[..self.name_len]
    }
}

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
    /// Automatic tiering (`NODALLOC_TIERING=auto`) found it cold: its new bags come from far
    /// memory and its full bags were moved there.
    pub cold: bool,
}

impl PartitionStats {
    /// Bags reclaimed whole, in percent of reclaims and pick-aparts (0 with neither).
    pub fn reclaim_percent(&self) -> u64 {
        reclaim_percent(self.reclaimed, self.picked)
    }
}

node_summed_fields! {
    stats_struct! {
        /// A snapshot of the whole allocator. The sums of the nodes' figures (the [`NodeStats`]
        /// fields of the same names) come first.
        #[derive(Clone, Copy, Debug)]
        pub struct Stats {
            /// Shared-structure operations, summed over the nodes (see [`NodeStats::shared`]).
            pub shared: SharedOpCounts = SharedOpCounts::default(),
            /// Objects (small and large) allocated so far.
            pub allocs: u64 = 0,
            /// Objects (small and large) freed so far.
            pub frees: u64 = 0,
            /// Threads with a live heap.
            pub threads: usize = 0,
            /// The hard limit on committed bytes (0: none).
            pub limit: usize = 0,
            /// The most ever committed at once.
            pub peak_committed: usize = 0,
            /// Upkeep passes the maintenance thread made (`NODALLOC_BACKGROUND`; 0 without one).
            pub background_passes: u64 = 0,
            /// The maintenance thread's CPU time in ns, as of its last pass or step that
            /// prepared something.
            pub background_cpu_ns: u64 = 0,
            /// Chunks (2 MiB) the maintenance thread populated ahead of demand.
            pub background_prepared: usize = 0,
            /// Bags of big classes the maintenance thread carved ahead of demand.
            pub background_bags: u64 = 0,
            /// Bytes of free spans the maintenance thread decommitted (counted when each of its
            /// steps ends: a snapshot taken during a step may see memory gone and not yet here).
            pub background_decommitted: u64 = 0,
            /// First-class heaps alive now (`nodalloc::Heap`, `nodalloc_heap_new`).
            pub heaps: usize = 0,
            /// First-class heaps created so far.
            pub heaps_created: u64 = 0,
            /// First-class heaps dropped so far.
            pub heaps_dropped: u64 = 0,
            /// Call-site partitions, P (0: the mode is off).
            pub partitions: usize = 0,
            /// Partitions that ever had a bag.
            pub partitions_used: usize = 0,
            /// Bags reclaimed whole, over all partitions (see [`PartitionStats::reclaimed`]).
            pub bags_reclaimed: u64 = 0,
            /// Bags picked apart, over all partitions (see [`PartitionStats::picked`]).
            pub bags_picked: u64 = 0,
            /// Automatic tiering is on (`NODALLOC_TIERING=auto`).
            pub tiering: bool = false,
            /// Partitions automatic tiering found cold.
            pub cold_partitions: usize = 0,
            /// Live bytes of the cold partitions.
            pub cold_live: usize = 0,
            /// Bags automatic tiering moved to far memory so far.
            pub bags_moved_far: u64 = 0,
            /// Bags automatic tiering moved back near so far.
            pub bags_moved_near: u64 = 0,
            /// Moves (and retries) of automatic tiering that the kernel left part done: it
            /// does not move a page a forked child still shares, nor one busy at that moment.
            pub bag_moves_partly: u64 = 0,
            /// Bags whose move was left part done, waiting for another try.
            pub bags_awaiting_retry: usize = 0,
            /// Bytes of live objects on far nodes ([`NodeStats::far`]): part of `allocated`.
            pub far_allocated: usize = 0,
            /// Bytes committed on far nodes: part of `committed`.
            pub far_committed: usize = 0,
            /// The hard limit on bytes committed on near nodes (`NODALLOC_NEAR_LIMIT`; 0: none).
            pub near_limit: usize = 0,
            /// The hard limit on bytes committed on far nodes (`NODALLOC_FAR_LIMIT`; 0: none).
            pub far_limit: usize = 0,
            pub(crate) node_count: usize = 0,
            pub(crate) simulated: bool = false,
            pub(crate) nodes: [NodeStats; MAX_NODES] = [NodeStats::default(); MAX_NODES],
            pub(crate) classes: [ClassStats; NUM_CLASSES] = [ClassStats::default(); NUM_CLASSES],
            pub(crate) top: [PartitionStats; TOP_PARTITIONS] =
                [PartitionStats::default(); TOP_PARTITIONS],
            pub(crate) top_len: usize = 0,
            pub(crate) heap_lines: [HeapLine; TOP_HEAPS] = [HeapLine::default(); TOP_HEAPS],
            pub(crate) heap_lines_len: usize = 0,
        }
    }
}

impl Stats {
    /// The partitions with the most live bytes, most first (at most [`TOP_PARTITIONS`]; none
    /// with the mode off).
    pub fn top_partitions(&self) -> &[PartitionStats] {
        &self.top[..self.top_len]
    }

    /// Keeps `partition` among the top ones if it holds more live bytes than the last.
    pub(crate) fn offer_partition(&mut self, partition: PartitionStats) {
        offer_top(&mut self.top, &mut self.top_len, partition, |p| p.live);
    }

    /// The first-class heaps with the most live bytes, most first (at most [`TOP_HEAPS`]).
    pub fn top_heaps(&self) -> &[HeapLine] {
        &self.heap_lines[..self.heap_lines_len]
    }

    /// Keeps `heap` among the listed heaps if it holds more live bytes than the last.
    pub(crate) fn offer_heap(&mut self, heap: HeapLine) {
        offer_top(&mut self.heap_lines, &mut self.heap_lines_len, heap, |h| {
            h.live
        });
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
        let totals = self.summed_values();
        w.str("  ");
        write_summed(&mut w, ReportLine::TotalBytes, &totals, self.allocs, "");
        w.str(", peak committed ").size(self.peak_committed as u64);
        if self.limit != 0 {
            w.str(" (limit ").size(self.limit as u64).str(")");
        }
        w.str("\n  allocs ")
            .decimal(self.allocs)
            .str(", frees ")
            .decimal(self.frees);
        write_summed(&mut w, ReportLine::TotalObjects, &totals, self.allocs, ", ");
        w.str("\n");
        if self.near_limit != 0 {
            w.str("  near memory: committed ")
                .size(self.committed.saturating_sub(self.far_committed) as u64)
                .str(" (limit ")
                .size(self.near_limit as u64)
                .str(")\n");
        }
        if self.nodes().iter().any(|node| node.far) || self.far_limit != 0 {
            w.str("  far memory: allocated ")
                .size(self.far_allocated as u64);
            write_committed(&mut w, self.far_committed, self.far_limit);
        }
        w.write_to(fd);
        for (node, stats) in self.nodes().iter().enumerate() {
            w.clear();
            w.str("  node ").decimal(node as u64).str(": ");
            let values = stats.summed_values();
            if stats.far {
                w.str("far, ");
            }
            write_summed(&mut w, ReportLine::Node, &values, stats.allocs, "");
            // After huge pages, the last of the line's summed fields.
            w.str(" (")
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
        if self.heaps_created != 0 {
            self.write_heaps(fd, &mut w);
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

    /// The first-class heaps' lines: their counts, then the heaps with the most live bytes.
    fn write_heaps(&self, fd: i32, w: &mut Writer) {
        w.clear();
        w.str("  first-class heaps: ")
            .decimal(self.heaps as u64)
            .str(" alive, ")
            .decimal(self.heaps_created)
            .str(" created, ")
            .decimal(self.heaps_dropped)
            .str(" dropped\n");
        w.write_to(fd);
        for heap in self.top_heaps() {
            w.clear();
            w.str("    heap ")
                .decimal(heap.index as u64)
                .str(".")
                .decimal(heap.generation as u64);
            if !heap.name().is_empty() {
                w.str(" '").bytes(heap.name()).str("'");
            }
            w.str(" on node ")
                .decimal(heap.node as u64)
                .str(": live ")
                .size(heap.live as u64);
            write_committed(w, heap.committed, heap.limit);
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
        if self.tiering {
            w.str("  automatic tiering: ")
                .decimal(self.cold_partitions as u64)
                .str(" cold partition(s) holding ")
                .size(self.cold_live as u64)
                .str(", bags moved far ")
                .decimal(self.bags_moved_far)
                .str(", back near ")
                .decimal(self.bags_moved_near)
                .str(", ")
                .decimal(self.bag_moves_partly)
                .str(" move(s) left part done, ")
                .decimal(self.bags_awaiting_retry as u64)
                .str(" bag(s) awaiting a retry\n");
        }
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
            if partition.cold {
                w.str(", cold");
            }
            if partition.site != 0 {
                w.str(", site ").hex(partition.site);
                crate::os::symbolize(partition.site, w);
            }
            w.str("\n");
            w.write_to(fd);
        }
    }
}

/// Ends a line with `, committed X` and, when there is one, ` (limit Y)`.
fn write_committed(w: &mut Writer, committed: usize, limit: usize) {
    w.str(", committed ").size(committed as u64);
    if limit != 0 {
        w.str(" (limit ").size(limit as u64).str(")");
    }
    w.str("\n");
}

/// Inserts `item` into `list[..*len]`, kept in decreasing `key` order and at most
/// `list.len()` long, if it ranks among them (an allocation-free top-N).
pub(crate) fn offer_top<T: Copy>(
    list: &mut [T],
    len: &mut usize,
    item: T,
    key: impl Fn(&T) -> usize,
) {
    let mut at = *len;
    while at > 0 && key(&list[at - 1]) < key(&item) {
        at -= 1;
    }
    if at >= list.len() {
        return;
    }
    let end = (*len + 1).min(list.len());
    list.copy_within(at..end - 1, at + 1);
    list[at] = item;
    *len = end;
}

/// A node's shared-structure operations per 1 000 of its allocations, one line.
fn write_shared_ops(w: &mut Writer, node: &NodeStats) {
    let allocs = node.allocs;
    w.str("    shared operations per 1000 allocations: ");
    for (field, count) in SHARED_OP_FIELDS.iter().zip(node.shared.values()) {
        w.str(field.before);
        write_value(w, field.shown, count, allocs);
    }
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

/// The summed fields `line` prints, `label value` each, the first after `separator` and the
/// others after `, `; `values` in table order, `allocs` the base of rates.
fn write_summed(
    w: &mut Writer,
    line: ReportLine,
    values: &[u64; SUMMED_FIELDS.len()],
    allocs: u64,
    mut separator: &str,
) {
    for (field, value) in SUMMED_FIELDS.iter().zip(values) {
        if field.lines.contains(&line) {
            w.str(separator).str(field.label).str(" ");
            write_value(w, field.shown, *value, allocs);
            separator = ", ";
        }
    }
}

/// `value` as `shown` says; `allocs` is the base of a rate.
fn write_value(w: &mut Writer, shown: Shown, value: u64, allocs: u64) {
    match shown {
        Shown::Bytes => {
            w.size(value);
        }
        Shown::Count => {
            w.decimal(value);
        }
        Shown::PerThousand => write_per_thousand(w, value, allocs),
    }
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
mod tests;
