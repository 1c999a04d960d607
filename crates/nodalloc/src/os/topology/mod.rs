//! What the machine looks like to the allocator: the usable NUMA nodes (nodes with memory that
//! this process may use), their CPUs, memory and SLIT distances, the affinity the process started
//! with, and the kernel modes that change how memory behaves (THP, overcommit, `RLIMIT_AS`).
//!
//! Read once from `/sys` and `/proc` without allocating. When they cannot be read, the topology
//! is one node holding every CPU the process may use, which is always a correct (if NUMA-blind)
//! answer. With `NODALLOC_SIMULATE_NODES=N` the CPUs are split into N fake nodes so that every
//! multi-node path runs on a one-node machine; a simulated topology never issues `mbind`.
//!
//! Memory tiers (`tiers.rs`): which nodes are far memory, and each node's far node.

mod sysfs;
mod tiers;

#[cfg(test)]
pub(crate) use tiers::test_machine;
pub use tiers::{parse_tiers, TierSource};

use super::cpuset::{for_each_in_list, parse_decimal, trim, CpuSet, MAX_CPUS};
use super::{read_file, thread_affinity, PathBuffer};

/// Usable nodes the allocator tracks. Regions, node heaps and stats are sized by the real count.
pub const MAX_NODES: usize = 32;

/// The arena's smallest region (`arena::MIN_REGION_SHIFT`, restated: this layer sits below the
/// arena). `RLIMIT_AS` must leave room for one per node; see [`Topology::fit_address_space`].
pub const MIN_REGION_BYTES: u64 = 64 << 20;

/// The transparent-huge-page mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThpMode {
    /// Huge pages wherever the kernel can.
    Always,
    /// Huge pages only where a program asks (`MADV_HUGEPAGE`).
    Madvise,
    /// No transparent huge pages.
    Never,
    /// Not readable (no `/sys`, or THP not built in).
    Unknown,
}

/// The kernel's overcommit policy (`/proc/sys/vm/overcommit_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OvercommitMode {
    /// 0: obviously impossible requests fail.
    Heuristic,
    /// 1: every request succeeds.
    Always,
    /// 2: commit charge is capped (`CommitLimit`); nodalloc commits on demand.
    Never,
}

/// One usable NUMA node.
#[derive(Clone, Copy)]
pub struct NodeInfo {
    /// The kernel's node number (`nodeN`); usable nodes are indexed densely from 0 instead.
    pub os_id: usize,
    /// The CPUs of the node this process may use.
    pub cpus: CpuSet,
    /// The node's memory (`MemTotal` of its `meminfo`).
    pub memory_bytes: u64,
}

/// The allocator's view of the machine; see the module documentation.
#[derive(Clone, Copy)]
pub struct Topology {
    node_count: usize,
    nodes: [NodeInfo; MAX_NODES],
    distances: [[u8; MAX_NODES]; MAX_NODES],
    cpu_to_node: [u8; MAX_CPUS],
    process_cpus: CpuSet,
    simulated: bool,
    thp: ThpMode,
    overcommit: OvercommitMode,
    address_space_limit: Option<u64>,
    /// RAM plus swap (`/proc/meminfo`), 0 if unknown: under heuristic overcommit the kernel
    /// refuses single requests larger than this, and so does nodalloc.
    memory_total: u64,
    /// The far nodes (bit per usable node; see `tiers.rs`).
    far: u32,
    /// Each usable node's nearest far node, `u8::MAX` for none.
    far_of: [u8; MAX_NODES],
    /// Each usable node's kernel memory tier id plus one (0: none known).
    kernel_tier: [u16; MAX_NODES],
    tier_source: TierSource,
    /// Each usable node's weighted-interleave weight (0: the kernel has none).
    weights: [u8; MAX_NODES],
}

const EMPTY_NODE: NodeInfo = NodeInfo {
    os_id: 0,
    cpus: CpuSet::new(),
    memory_bytes: 0,
};

impl Topology {
    /// A one-node topology holding `cpus`: the fallback, and the base of every other.
    pub const fn single(cpus: CpuSet) -> Topology {
        let mut nodes = [EMPTY_NODE; MAX_NODES];
        nodes[0].cpus = cpus;
        let mut distances = [[0u8; MAX_NODES]; MAX_NODES];
        distances[0][0] = 10;
        Topology {
            node_count: 1,
            nodes,
            distances,
            cpu_to_node: [0; MAX_CPUS],
            process_cpus: cpus,
            simulated: false,
            thp: ThpMode::Unknown,
            overcommit: OvercommitMode::Heuristic,
            address_space_limit: None,
            memory_total: 0,
            far: 0,
            far_of: [u8::MAX; MAX_NODES],
            kernel_tier: [0; MAX_NODES],
            tier_source: TierSource::None,
            weights: [0; MAX_NODES],
        }
    }

    /// Reads the machine into `self`, in place: the struct is about 30 KiB, too big to build on
    /// the stack of whichever thread happens to allocate first. `simulate` > 0 asks for a
    /// simulated topology.
    pub fn detect_into(&mut self, simulate: usize) {
        self.detect_nodes(simulate);
        self.read_tiers();
    }

    /// [`Self::detect_into`] for a heap starting in a process: the kernel's tiers and
    /// interleave weights are not read on a machine of one node, which has nothing to tier or
    /// interleave with (each file costs a fresh process microseconds; the heap's topology
    /// then shows its node with no kernel tier).
    pub fn detect_for_heap(&mut self, simulate: usize) {
        self.detect_nodes(simulate);
        if self.node_count > 1 || self.simulated {
            self.read_tiers();
        } else {
            self.choose_far_nodes(None);
        }
    }

    fn detect_nodes(&mut self, simulate: usize) {
        let mut cpus = CpuSet::new();
        if !thread_affinity(&mut cpus) || cpus.is_empty() {
            cpus.insert(0);
        }
        self.reset(&cpus);
        self.thp = read_thp_mode();
        self.overcommit = read_overcommit_mode();
        self.address_space_limit = super::address_space_limit();
        self.memory_total = read_memory_total();
        if simulate > 0 {
            self.simulate(simulate);
        } else if !self.read_sys_nodes() {
            // Unreadable or empty /sys: one node with every CPU we may use.
            self.collapse_to_one_node(&cpus);
        }
        self.fit_address_space(&cpus);
    }

    /// Makes `self` one node holding `cpus`, keeping the kernel modes already read.
    fn collapse_to_one_node(&mut self, cpus: &CpuSet) {
        let (thp, overcommit, limit) = (self.thp, self.overcommit, self.address_space_limit);
        let memory_total = self.memory_total;
        self.reset(cpus);
        self.thp = thp;
        self.overcommit = overcommit;
        self.address_space_limit = limit;
        self.memory_total = memory_total;
    }

    /// The arena takes at most half of `RLIMIT_AS` (the rest is the program's) and needs one
    /// region of at least [`MIN_REGION_BYTES`] per node. When N such regions exceed that half
    /// (`ulimit -v 256M` on 4 nodes), an N-node arena would leave the program next to nothing or
    /// not fit at all, and every allocation would fail: use one node instead, with every CPU.
    /// Placement is left to the kernel, as on a one-node machine; one warning says so.
    fn fit_address_space(&mut self, cpus: &CpuSet) {
        let Some(limit) = self.address_space_limit else {
            return;
        };
        let nodes = self.node_count;
        if nodes < 2 || nodes as u64 * MIN_REGION_BYTES <= limit / 2 {
            return;
        }
        self.collapse_to_one_node(cpus);
        super::warn(|w| {
            w.str("RLIMIT_AS of ")
                .size(limit)
                .str(" has no room for ")
                .decimal(nodes as u64)
                .str(" node regions; using one node");
        });
    }

    /// Makes `self` the one-node topology of `cpus`, field by field (no large temporary).
    fn reset(&mut self, cpus: &CpuSet) {
        self.node_count = 1;
        for node in self.nodes.iter_mut() {
            node.os_id = 0;
            node.cpus = CpuSet::new();
            node.memory_bytes = 0;
        }
        self.nodes[0].cpus = *cpus;
        for row in self.distances.iter_mut() {
            row.fill(0);
        }
        self.distances[0][0] = 10;
        self.cpu_to_node.fill(0);
        self.process_cpus = *cpus;
        self.simulated = false;
        self.thp = ThpMode::Unknown;
        self.overcommit = OvercommitMode::Heuristic;
        self.address_space_limit = None;
        self.memory_total = 0;
        self.far = 0;
        self.far_of.fill(u8::MAX);
        self.kernel_tier.fill(0);
        self.tier_source = TierSource::None;
        self.weights.fill(0);
    }

    /// Splits the process's CPUs into `count` fake nodes: contiguous blocks when there are enough
    /// CPUs, otherwise node i gets CPU i mod #CPUs. Distances grow with the index gap (10, 20,
    /// 30, …) so "nearest first" has a meaning.
    pub fn simulate(&mut self, count: usize) {
        let count = count.clamp(1, MAX_NODES);
        let cpus = self.process_cpus;
        let total = cpus.count().max(1);
        self.node_count = count;
        self.simulated = true;
        for node in 0..count {
            let mut set = CpuSet::new();
            if total >= count {
                let (start, end) = (node * total / count, (node + 1) * total / count);
                for i in start..end {
                    if let Some(cpu) = cpus.nth(i) {
                        set.insert(cpu);
                    }
                }
            } else if let Some(cpu) = cpus.nth(node % total) {
                set.insert(cpu);
            }
            self.nodes[node] = NodeInfo {
                os_id: node,
                cpus: set,
                memory_bytes: 0,
            };
            for other in 0..count {
                self.distances[node][other] = (10 + 10 * node.abs_diff(other)).min(255) as u8;
            }
        }
        self.cpu_to_node.fill(0);
        for node in (0..count).rev() {
            for cpu in self.nodes[node].cpus.iter() {
                self.cpu_to_node[cpu] = node as u8;
            }
        }
    }

    /// Usable nodes.
    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// The usable node `node` (dense index from 0).
    pub fn node(&self, node: usize) -> &NodeInfo {
        &self.nodes[node]
    }

    /// The SLIT distance between two usable nodes (10 = local).
    pub fn distance(&self, from: usize, to: usize) -> u8 {
        self.distances[from][to]
    }

    /// The usable node a CPU belongs to (node 0 for CPUs of no usable node).
    pub fn node_of_cpu(&self, cpu: usize) -> usize {
        if cpu < MAX_CPUS {
            self.cpu_to_node[cpu] as usize
        } else {
            0
        }
    }

    /// The CPUs the process could run on when the allocator started (taskset, numactl, cpusets).
    pub fn process_cpus(&self) -> &CpuSet {
        &self.process_cpus
    }

    /// Bytes node `node` could still give (its `meminfo`: free memory and half its inactive file
    /// pages, which the kernel may reclaim; not all of them can be, tmpfs and ramfs pages among
    /// them); `None` on a simulated topology or without sysfs.
    pub fn node_available_bytes(&self, node: usize) -> Option<u64> {
        if self.simulated {
            return None;
        }
        let mut buffer = [0u8; 4096];
        let path = PathBuffer::numbered(
            b"/sys/devices/system/node/node",
            self.nodes[node].os_id,
            b"/meminfo",
        );
        let text = read_file(path.as_cstr(), &mut buffer)?;
        let free = meminfo_field(text, b"MemFree:")?;
        Some(free + meminfo_field(text, b"Inactive(file):").unwrap_or(0) / 2)
    }

    /// True when `NODALLOC_SIMULATE_NODES` made the topology up.
    pub fn is_simulated(&self) -> bool {
        self.simulated
    }

    /// The transparent-huge-page mode at start-up.
    pub fn thp_mode(&self) -> ThpMode {
        self.thp
    }

    /// The overcommit policy at start-up.
    pub fn overcommit_mode(&self) -> OvercommitMode {
        self.overcommit
    }

    /// The `RLIMIT_AS` soft limit in bytes, if one is set.
    pub fn address_space_limit(&self) -> Option<u64> {
        self.address_space_limit
    }

    /// Pretends the process runs under `RLIMIT_AS` = `bytes` (tests of the arena's sizing).
    #[cfg(test)]
    pub fn pretend_address_space_limit(&mut self, bytes: u64) {
        self.address_space_limit = Some(bytes);
    }

    /// RAM plus swap in bytes, 0 if unknown.
    pub fn memory_total(&self) -> u64 {
        self.memory_total
    }

    /// Nodes other than `node` in stealing and spilling order: nodes with CPUs nearest first
    /// (ties by index), then nodes without CPUs (CXL, HBM), nearest first, as a last resort. A
    /// CPU-less node is memory a program places there on purpose (`alloc_on_node`); it is used
    /// for ordinary allocations only when every node with CPUs is full.
    pub fn nearest_nodes(&self, node: usize, out: &mut [u8; MAX_NODES]) -> usize {
        let mut length = 0;
        for other in 0..self.node_count {
            if other != node {
                out[length] = other as u8;
                length += 1;
            }
        }
        out[..length].sort_unstable_by_key(|&other| {
            let other = other as usize;
            (
                self.nodes[other].cpus.is_empty(),
                self.distances[node][other],
                other,
            )
        });
        length
    }
}

fn status_field<'a>(status: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    status
        .split(|&b| b == b'\n')
        .find(|line| line.starts_with(key))
        .map(|line| trim(&line[key.len()..]))
}

/// `Node 0 MemTotal:       24551292 kB` → bytes.
fn meminfo_total(text: &[u8]) -> Option<u64> {
    meminfo_field(text, b"MemTotal:")
}

/// The field `key` (with its colon) of a node's `meminfo`, in bytes.
fn meminfo_field(text: &[u8], key: &[u8]) -> Option<u64> {
    let line = text
        .split(|&b| b == b'\n')
        .find(|line| line.windows(key.len()).any(|w| w == key))?;
    let after = line.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = trim(&line[after..]);
    let digits_end = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    Some(parse_decimal(&rest[..digits_end])? as u64 * 1024)
}

fn read_memory_total() -> u64 {
    if let Some((total, _)) = super::memory_sizes() {
        return total;
    }
    let mut buffer = [0u8; 4096];
    let Some(text) = read_file(c"/proc/meminfo", &mut buffer) else {
        return 0;
    };
    let field = |key: &[u8]| -> u64 {
        status_field(text, key)
            .and_then(|value| {
                let end = value
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .unwrap_or(value.len());
                parse_decimal(&value[..end])
            })
            .map_or(0, |kib| kib as u64 * 1024)
    };
    field(b"MemTotal:") + field(b"SwapTotal:")
}

fn read_thp_mode() -> ThpMode {
    let mut buffer = [0u8; 256];
    match read_file(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buffer) {
        Some(text) if contains(text, b"[always]") => ThpMode::Always,
        Some(text) if contains(text, b"[madvise]") => ThpMode::Madvise,
        Some(text) if contains(text, b"[never]") => ThpMode::Never,
        _ => ThpMode::Unknown,
    }
}

fn read_overcommit_mode() -> OvercommitMode {
    let mut buffer = [0u8; 16];
    match read_file(c"/proc/sys/vm/overcommit_memory", &mut buffer).and_then(parse_decimal) {
        Some(1) => OvercommitMode::Always,
        Some(2) => OvercommitMode::Never,
        _ => OvercommitMode::Heuristic,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed() -> Box<Topology> {
        Box::new(Topology::single(CpuSet::new()))
    }

    #[test]
    fn real_topology_has_a_node_with_the_process_cpus() {
        let mut topology = boxed();
        topology.detect_into(0);
        assert!(topology.node_count() >= 1);
        assert!(!topology.is_simulated());
        let mut all = CpuSet::new();
        for node in 0..topology.node_count() {
            for cpu in topology.node(node).cpus.iter() {
                all.insert(cpu);
            }
            assert_eq!(topology.distance(node, node), 10);
        }
        assert!(all.is_subset_of(topology.process_cpus()));
        let cpu = crate::os::current_cpu().unwrap();
        assert!(topology.node_of_cpu(cpu) < topology.node_count());
    }

    #[test]
    fn simulated_topologies_cover_every_cpu_and_order_neighbours() {
        for count in [1, 2, 4, 8] {
            let mut topology = boxed();
            topology.detect_into(count);
            assert_eq!(topology.node_count(), count);
            assert!(topology.is_simulated());
            for node in 0..count {
                assert!(
                    !topology.node(node).cpus.is_empty(),
                    "node {node} of {count} has no CPU"
                );
            }
            for cpu in topology.process_cpus().iter() {
                let node = topology.node_of_cpu(cpu);
                assert!(topology.node(node).cpus.contains(cpu));
            }
            let mut order = [0u8; MAX_NODES];
            let n = topology.nearest_nodes(0, &mut order);
            assert_eq!(n, count - 1);
            for pair in order[..n].windows(2) {
                assert!(
                    topology.distance(0, pair[0] as usize)
                        <= topology.distance(0, pair[1] as usize)
                );
            }
        }
    }

    #[test]
    fn cpuless_nodes_come_last_in_the_spill_order_even_when_nearest() {
        let mut topology = boxed();
        topology.detect_into(4);
        // Node 1 (nearest to 0) has memory but no CPU, like a CXL expander.
        topology.nodes[1].cpus = CpuSet::new();
        let mut order = [0u8; MAX_NODES];
        let n = topology.nearest_nodes(0, &mut order);
        assert_eq!(&order[..n], &[2, 3, 1]);
    }

    #[test]
    fn an_address_space_limit_too_small_for_every_node_leaves_one_node() {
        for (nodes, limit_mib, expected) in [(4, 256, 1), (3, 256, 1), (2, 256, 2), (4, 512, 4)] {
            let mut topology = boxed();
            topology.detect_into(nodes);
            topology.address_space_limit = Some(limit_mib << 20);
            let cpus = *topology.process_cpus();
            topology.fit_address_space(&cpus);
            assert_eq!(
                topology.node_count(),
                expected,
                "{nodes} nodes, {limit_mib} MiB"
            );
            assert_eq!(topology.address_space_limit(), Some(limit_mib << 20));
            if expected == 1 {
                assert_eq!(topology.node(0).cpus.count(), cpus.count());
            }
        }
    }

    #[test]
    fn meminfo_and_status_parse() {
        assert_eq!(
            meminfo_total(b"Node 0 MemTotal:       2048 kB\nNode 0 MemFree: 1 kB\n"),
            Some(2 << 20)
        );
        let node = b"Node 1 MemFree:  3 kB\nNode 1 Inactive(file):  5 kB\n";
        assert_eq!(meminfo_field(node, b"MemFree:"), Some(3 << 10));
        assert_eq!(meminfo_field(node, b"Inactive(file):"), Some(5 << 10));
        assert_eq!(meminfo_field(node, b"Active(file):"), None);
        assert_eq!(
            status_field(
                b"Name:\tx\nMems_allowed_list:\t0-1\n",
                b"Mems_allowed_list:"
            ),
            Some(&b"0-1"[..])
        );
    }

    /// The system calls that replace two file reads at start give what the files say: the
    /// cpuset's nodes (`Mems_allowed_list` of `/proc/self/status`), and RAM plus swap
    /// (`MemTotal` and `SwapTotal` of `/proc/meminfo`, which the kernel rounds to KiB).
    #[test]
    fn the_system_calls_read_what_the_proc_files_show() {
        let mut mask = [0u64; crate::os::cpuset::MAX_NODE_WORDS];
        assert!(crate::os::allowed_memory_nodes(&mut mask));
        let mut buffer = [0u8; 4096];
        let status = read_file(c"/proc/self/status", &mut buffer).expect("/proc/self/status");
        let list = status_field(status, b"Mems_allowed_list:").expect("Mems_allowed_list");
        let mut from_file = [0u64; crate::os::cpuset::MAX_NODE_WORDS];
        for_each_in_list(list, |id| from_file[id / 64] |= 1 << (id % 64));
        assert_eq!(mask, from_file);
        assert_ne!(mask[0] & 1, 0, "no node in the cpuset");

        let (total, ram) = crate::os::memory_sizes().expect("sysinfo");
        let mut buffer = [0u8; 4096];
        let meminfo = read_file(c"/proc/meminfo", &mut buffer).expect("/proc/meminfo");
        let kib = |key: &[u8]| {
            let value = status_field(meminfo, key).expect("a meminfo field");
            let end = value
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(value.len());
            parse_decimal(&value[..end]).expect("a number") as u64 * 1024
        };
        assert_eq!(ram / 1024 * 1024, kib(b"MemTotal:"));
        assert_eq!(total / 1024 * 1024, kib(b"MemTotal:") + kib(b"SwapTotal:"));
    }

    /// The one-node probe (a one-bit mask for `get_mempolicy`) says one node exactly where the
    /// kernel's possible nodes are one; and the kernel refuses a mask shorter than its node
    /// count, which the probe relies on (here: a mask of no bits at all).
    #[test]
    fn the_one_node_probe_agrees_with_the_possible_nodes() {
        let mut buffer = [0u8; 4096];
        let possible = read_file(c"/sys/devices/system/node/possible", &mut buffer)
            .expect("/sys/devices/system/node/possible");
        let mut count = 0;
        for_each_in_list(possible, |_| count += 1);
        assert_eq!(
            crate::os::single_possible_node(),
            count == 1,
            "possible nodes: {:?}",
            core::str::from_utf8(possible)
        );
        assert!(
            !crate::os::accepts_node_mask_of(0),
            "a mask of no bits was accepted"
        );
    }
}
