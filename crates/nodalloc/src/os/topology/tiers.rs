//! Memory tiers: which usable nodes are **far** memory (CXL expanders, other memory-only nodes
//! in a slower tier) and, for each node, the far node its cold memory goes to.
//!
//! The kernel groups nodes into tiers (`/sys/devices/virtual/memory_tiering/memory_tierN`, a
//! smaller N being faster memory; Linux 6.1+). The near tier is the fastest one that holds a
//! node with CPUs; every node of a slower tier is far. When the kernel puts every node in one
//! tier (or has no tiers), the nodes without CPUs are far: memory-only nodes are what servers
//! attach far memory as. `NODALLOC_TIERS` overrides both. Each node's far node is the nearest far
//! node by distance (ties by index); a far node has none, and so does every node of a machine
//! with no far memory, where a request for far memory is served near.

use super::*;
use crate::os::for_each_dir_entry;
use core::ffi::CStr;

/// How the far nodes were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierSource {
    /// No far memory: one tier, every node with CPUs (or no readable topology).
    None,
    /// The kernel's memory tiers put some nodes in a slower tier than the CPUs' nodes.
    Kernel,
    /// One kernel tier (or none readable): the nodes without CPUs are far.
    CpuLess,
    /// `NODALLOC_TIERS` named the far nodes.
    Option,
}

/// The directory of the kernel's memory tiers.
const TIERS_DIR: &CStr = c"/sys/devices/virtual/memory_tiering";

/// The tier id of the nodes of no readable tier.
const NO_TIER: u16 = 0;

impl Topology {
    /// Reads the kernel's memory tiers into `kernel_tier` (0 where unknown) and chooses the far
    /// nodes from them. A simulated topology has no far nodes.
    pub(super) fn read_tiers(&mut self) {
        self.kernel_tier.fill(NO_TIER);
        self.weights.fill(0);
        if !self.simulated {
            for node in 0..self.node_count {
                let path = PathBuffer::numbered(
                    b"/sys/kernel/mm/mempolicy/weighted_interleave/node",
                    self.nodes[node].os_id,
                    b"",
                );
                let mut buffer = [0u8; 16];
                if let Some(weight) = read_file(path.as_cstr(), &mut buffer)
                    .and_then(|text| parse_decimal(trim(text)))
                {
                    self.weights[node] = weight.clamp(1, 255) as u8;
                }
            }
            // Tier ids plus one (0 stands for no tier).
            let mut found = [0u16; MAX_NODES];
            let mut tiers = 0;
            for_each_dir_entry(TIERS_DIR, |name| {
                if let (Some(id), true) = (name.strip_prefix(b"memory_tier"), tiers < MAX_NODES) {
                    if let Some(id) = parse_decimal(id).filter(|&id| id < u16::MAX as usize) {
                        found[tiers] = id as u16 + 1;
                        tiers += 1;
                    }
                }
            });
            for &id_plus_one in &found[..tiers] {
                let path = PathBuffer::numbered(
                    b"/sys/devices/virtual/memory_tiering/memory_tier",
                    id_plus_one as usize - 1,
                    b"/nodelist",
                );
                let mut buffer = [0u8; 256];
                if let Some(text) = read_file(path.as_cstr(), &mut buffer) {
                    for_each_in_list(text, |os_id| {
                        if let Some(node) = self.usable_index_of(os_id) {
                            self.kernel_tier[node] = id_plus_one;
                        }
                    });
                }
            }
        }
        self.choose_far_nodes(None);
    }

    /// The dense index of the usable node the kernel numbers `os_id`.
    fn usable_index_of(&self, os_id: usize) -> Option<usize> {
        (0..self.node_count).find(|&node| self.nodes[node].os_id == os_id)
    }

    /// Chooses the far nodes: those `given` names (a mask of the kernel's node numbers, from
    /// `NODALLOC_TIERS`), else by the kernel's tiers, else the nodes without CPUs; then each
    /// node's far node. A given node that is not usable is left out with a warning; a given
    /// list that leaves every node with CPUs far, or names no usable node, falls back to the
    /// detected choice with a warning.
    pub fn choose_far_nodes(&mut self, given: Option<u64>) {
        let (far, source) = match given.map(|mask| self.far_from_option(mask)) {
            Some(Some(far)) => (far, TierSource::Option),
            _ => self.detected_far_nodes(),
        };
        self.far = far;
        self.tier_source = if far == 0 { TierSource::None } else { source };
        for node in 0..self.node_count {
            self.far_of[node] = self.nearest_far(node).map_or(u8::MAX, |far| far as u8);
        }
    }

    /// The far nodes `mask` names (kernel numbers), as a mask of usable nodes, or `None` when
    /// the list cannot be used (warned).
    fn far_from_option(&self, mask: u64) -> Option<u32> {
        let mut far = 0u32;
        for os_id in 0..64 {
            if mask & (1 << os_id) == 0 {
                continue;
            }
            match self.usable_index_of(os_id) {
                Some(node) => far |= 1 << node,
                None => crate::os::warn(|w| {
                    w.str("NODALLOC_TIERS names node ")
                        .decimal(os_id as u64)
                        .str(", which is not a usable node; left out");
                }),
            }
        }
        let with_cpus = (0..self.node_count).filter(|&node| !self.nodes[node].cpus.is_empty());
        if far == 0 || with_cpus.clone().all(|node| far & (1 << node) != 0) {
            crate::os::warn(|w| {
                w.str(if far == 0 {
                    "NODALLOC_TIERS names no usable far node"
                } else {
                    "NODALLOC_TIERS makes every node with CPUs far"
                })
                .str("; using the kernel's tiers");
            });
            return None;
        }
        Some(far)
    }

    /// The far nodes by the kernel's tiers, or the nodes without CPUs when the tiers do not
    /// tell near from far.
    fn detected_far_nodes(&self) -> (u32, TierSource) {
        let count = self.node_count;
        let near_tier = (0..count)
            .filter(|&node| !self.nodes[node].cpus.is_empty() && self.kernel_tier[node] != NO_TIER)
            .map(|node| self.kernel_tier[node])
            .min();
        if let Some(near_tier) = near_tier {
            let slower = (0..count)
                .filter(|&node| self.kernel_tier[node] > near_tier)
                .fold(0u32, |far, node| far | 1 << node);
            if slower != 0 {
                return (slower, TierSource::Kernel);
            }
        }
        if count < 2 {
            return (0, TierSource::None);
        }
        let cpuless = (0..count)
            .filter(|&node| self.nodes[node].cpus.is_empty())
            .fold(0u32, |far, node| far | 1 << node);
        if cpuless != 0 && cpuless.count_ones() < count as u32 {
            (cpuless, TierSource::CpuLess)
        } else {
            (0, TierSource::None)
        }
    }

    /// The far node nearest to `node` (ties by index), if `node` is near and one exists.
    fn nearest_far(&self, node: usize) -> Option<usize> {
        if self.is_far(node) {
            return None;
        }
        (0..self.node_count)
            .filter(|&other| self.is_far(other))
            .min_by_key(|&other| (self.distances[node][other], other))
    }

    /// True when usable node `node` is far memory.
    pub fn is_far(&self, node: usize) -> bool {
        node < MAX_NODES && self.far & (1 << node) != 0
    }

    /// True when some usable node is far memory.
    pub fn has_far_memory(&self) -> bool {
        (0..self.node_count).any(|node| self.is_far(node))
    }

    /// Where `node`'s far memory comes from: its nearest far node; `None` for a far node and on
    /// a machine without far memory (a request for far memory is then served near).
    pub fn far_node_of(&self, node: usize) -> Option<usize> {
        match self.far_of.get(node) {
            Some(&far) if far != u8::MAX && node < self.node_count => Some(far as usize),
            _ => None,
        }
    }

    /// How the far nodes were chosen.
    pub fn tier_source(&self) -> TierSource {
        self.tier_source
    }

    /// `node`'s weight for weighted interleave (`/sys/kernel/mm/mempolicy/weighted_interleave`,
    /// Linux 6.9+), if the kernel has one.
    pub fn interleave_weight(&self, node: usize) -> Option<u8> {
        self.weights
            .get(node)
            .copied()
            .filter(|&weight| weight != 0)
    }

    /// True when the kernel has weighted-interleave weights and someone set them (they are not
    /// all equal, as the kernel starts them).
    pub fn interleave_weights_set(&self) -> bool {
        let weights = &self.weights[..self.node_count];
        weights.iter().all(|&weight| weight != 0) && weights.iter().any(|&w| w != weights[0])
    }

    /// The kernel's memory tier of `node` (its `memory_tierN`), if the kernel reports one.
    pub fn kernel_tier_of(&self, node: usize) -> Option<usize> {
        match self.kernel_tier.get(node) {
            Some(&id) if id != NO_TIER => Some(id as usize - 1),
            _ => None,
        }
    }
}

/// Parses `NODALLOC_TIERS`: `near:LIST;far:LIST` in either order, or `far:LIST` alone, each
/// LIST of the kernel's node numbers (`0-1,3`; 0 to 63). Gives the far nodes as a mask; `None`
/// for a bad value, a node in both lists, or no far node.
pub fn parse_tiers(text: &[u8]) -> Option<u64> {
    let (mut near, mut far) = (0u64, 0u64);
    let (mut saw_near, mut saw_far) = (false, false);
    for part in trim(text).split(|&b| b == b';') {
        let part = trim(part);
        let (list, mask, seen) = if let Some(list) = part.strip_prefix(b"near:") {
            (list, &mut near, &mut saw_near)
        } else if let Some(list) = part.strip_prefix(b"far:") {
            (list, &mut far, &mut saw_far)
        } else {
            return None;
        };
        if *seen || trim(list).is_empty() {
            return None;
        }
        *seen = true;
        let mut fits = true;
        for_each_in_list(list, |id| {
            if id < 64 {
                *mask |= 1 << id;
            } else {
                fits = false;
            }
        })?;
        if !fits {
            return None;
        }
    }
    (far != 0 && near & far == 0).then_some(far)
}

/// A topology of `cpus_per_node` (0: memory-only) with kernel numbers 0.. and distances 10
/// local, 20 between nodes with CPUs, and `far_distance` to and from memory-only ones, and
/// interleave `weights` (0: none); for tests of what depends on tiers.
#[cfg(test)]
pub(crate) fn test_machine(
    cpus_per_node: &[usize],
    far_distance: u8,
    weights: &[u8],
) -> Box<Topology> {
    let mut topology = tests::machine(cpus_per_node, far_distance);
    topology.weights[..weights.len()].copy_from_slice(weights);
    topology.choose_far_nodes(None);
    topology
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topology of `cpus_per_node` (0: memory-only) with kernel numbers 0.. and distances
    /// 10 local, 20 between nodes with CPUs, and `far_distance` to and from memory-only ones.
    pub(super) fn machine(cpus_per_node: &[usize], far_distance: u8) -> Box<Topology> {
        let mut topology = Box::new(Topology::single(CpuSet::new()));
        topology.node_count = cpus_per_node.len();
        let mut cpu = 0;
        for (node, &cpus) in cpus_per_node.iter().enumerate() {
            let mut set = CpuSet::new();
            for _ in 0..cpus {
                set.insert(cpu);
                cpu += 1;
            }
            topology.nodes[node] = NodeInfo {
                os_id: node,
                cpus: set,
                memory_bytes: 1 << 30,
            };
        }
        for from in 0..cpus_per_node.len() {
            for to in 0..cpus_per_node.len() {
                topology.distances[from][to] = if from == to {
                    10
                } else if cpus_per_node[from] == 0 || cpus_per_node[to] == 0 {
                    far_distance
                } else {
                    20
                };
            }
        }
        topology
    }

    #[test]
    fn one_kernel_tier_makes_the_memory_only_nodes_far() {
        let mut topology = machine(&[2, 2, 0], 30);
        topology.kernel_tier[..3].fill(4 + 1);
        topology.choose_far_nodes(None);
        assert_eq!(topology.tier_source(), TierSource::CpuLess);
        assert!(!topology.is_far(0) && !topology.is_far(1) && topology.is_far(2));
        assert_eq!(topology.far_node_of(0), Some(2));
        assert_eq!(topology.far_node_of(1), Some(2));
        assert_eq!(
            topology.far_node_of(2),
            None,
            "a far node has no farther node"
        );
    }

    #[test]
    fn a_slower_kernel_tier_is_far_even_with_cpus_and_each_node_takes_its_nearest() {
        // Nodes 0 and 1 in tier 4; 2 and 3 in tier 22 (3 has CPUs, unusual but possible);
        // node 0 is nearer to 3, node 1 to 2.
        let mut topology = machine(&[2, 2, 0, 1], 30);
        for (node, tier) in [4, 4, 22, 22].into_iter().enumerate() {
            topology.kernel_tier[node] = tier + 1;
        }
        topology.distances[0][3] = 25;
        topology.distances[1][2] = 25;
        topology.distances[1][3] = 30;
        topology.choose_far_nodes(None);
        assert_eq!(topology.tier_source(), TierSource::Kernel);
        assert_eq!(topology.kernel_tier_of(2), Some(22));
        assert!(topology.is_far(2) && topology.is_far(3));
        assert_eq!(topology.far_node_of(0), Some(3));
        assert_eq!(topology.far_node_of(1), Some(2));
    }

    #[test]
    fn without_far_memory_every_tier_request_is_served_near() {
        for cpus in [&[2][..], &[1, 1], &[1, 1, 1, 1]] {
            let mut topology = machine(cpus, 30);
            topology.choose_far_nodes(None);
            assert_eq!(topology.tier_source(), TierSource::None);
            for node in 0..cpus.len() {
                assert!(!topology.is_far(node));
                assert_eq!(topology.far_node_of(node), None);
            }
        }
        // Every node memory-only (the process's CPUs are on no usable node): nothing is near,
        // so nothing is far either.
        let mut topology = machine(&[0, 0], 30);
        topology.choose_far_nodes(None);
        assert_eq!(topology.tier_source(), TierSource::None);
    }

    #[test]
    fn the_option_overrides_the_kernel_and_refuses_what_cannot_work() {
        let mut topology = machine(&[2, 2, 0], 30);
        topology.choose_far_nodes(Some(1 << 1));
        assert_eq!(topology.tier_source(), TierSource::Option);
        assert!(topology.is_far(1) && !topology.is_far(2));
        assert_eq!(topology.far_node_of(0), Some(1));
        assert_eq!(topology.far_node_of(2), Some(1));
        // Only unusable nodes named, or every node with CPUs far: the detected choice stands.
        topology.choose_far_nodes(Some(1 << 7));
        assert_eq!(topology.tier_source(), TierSource::CpuLess);
        topology.choose_far_nodes(Some(0b011));
        assert_eq!(topology.tier_source(), TierSource::CpuLess);
        assert!(topology.is_far(2) && !topology.is_far(0));
    }

    #[test]
    fn weights_count_as_set_only_when_the_kernel_has_them_and_they_differ() {
        assert!(!test_machine(&[2, 2, 0], 30, &[]).interleave_weights_set());
        assert!(!test_machine(&[2, 2, 0], 30, &[1, 1, 1]).interleave_weights_set());
        assert!(!test_machine(&[2, 2, 0], 30, &[3, 3, 0]).interleave_weights_set());
        let set = test_machine(&[2, 2, 0], 30, &[3, 3, 1]);
        assert!(set.interleave_weights_set());
        assert_eq!(set.interleave_weight(2), Some(1));
        assert_eq!(test_machine(&[2], 30, &[]).interleave_weight(0), None);
    }

    #[test]
    fn tier_lists_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_tiers(b"near:0,1;far:2"), Some(1 << 2));
        assert_eq!(parse_tiers(b" far:2-3 ; near:0 "), Some(0b1100));
        assert_eq!(parse_tiers(b"far:5"), Some(1 << 5));
        for bad in [
            &b""[..],
            b"near:0",
            b"far:",
            b"near:0;far:0",
            b"far:1;far:2",
            b"slow:2",
            b"far:64",
            b"far:x",
            b"near:0,far:1",
        ] {
            assert_eq!(parse_tiers(bad), None, "{:?}", core::str::from_utf8(bad));
        }
    }

    /// A heap's start reads the same nodes as `detect_into`, and the kernel's tiers only where
    /// there are several nodes (simulated ones included).
    #[test]
    fn a_heap_reads_the_tiers_of_several_nodes_only() {
        for simulate in [0, 3] {
            let mut full = Box::new(Topology::single(CpuSet::new()));
            full.detect_into(simulate);
            let mut quick = Box::new(Topology::single(CpuSet::new()));
            quick.detect_for_heap(simulate);
            assert_eq!(quick.node_count(), full.node_count());
            for node in 0..full.node_count() {
                assert_eq!(quick.node(node).cpus, full.node(node).cpus, "node {node}");
                assert_eq!(
                    quick.far_node_of(node),
                    full.far_node_of(node),
                    "node {node}"
                );
                let expected = if full.node_count() > 1 {
                    full.kernel_tier_of(node)
                } else {
                    None
                };
                assert_eq!(quick.kernel_tier_of(node), expected, "node {node}");
            }
            assert_eq!(quick.tier_source(), full.tier_source());
        }
    }

    #[test]
    fn the_kernels_tiers_are_read_where_it_has_them() {
        let mut topology = Box::new(Topology::single(CpuSet::new()));
        topology.detect_into(0);
        let mut any_dir = false;
        for_each_dir_entry(TIERS_DIR, |name| {
            any_dir |= name.starts_with(b"memory_tier")
        });
        for node in 0..topology.node_count() {
            assert_eq!(
                topology.kernel_tier_of(node).is_some(),
                any_dir,
                "node {node}"
            );
        }
        if topology.node_count() == 1 {
            assert_eq!(topology.tier_source(), TierSource::None);
        }
    }
}
