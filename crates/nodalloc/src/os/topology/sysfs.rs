//! Reading the machine's NUMA nodes from `/sys/devices/system/node`: each node's CPUs (as this
//! process may use them), memory and distances, without allocating.

use super::*;

impl Topology {
    /// Reads `/sys/devices/system/node`. Returns false when nothing usable was found.
    pub(super) fn read_sys_nodes(&mut self) -> bool {
        let mut buffer = [0u8; 4096];
        let mut online = [0u16; MAX_NODES * 4];
        let mut online_count = 0;
        let mut with_memory = [false; MAX_NODES * 4];
        if crate::os::single_possible_node() {
            // Node 0 is the only node the kernel can have: online, and it holds the memory.
            online_count = 1;
            with_memory[0] = true;
        } else {
            let Some(text) = read_file(c"/sys/devices/system/node/online", &mut buffer) else {
                return false;
            };
            if for_each_in_list(text, |id| {
                if online_count < online.len() {
                    online[online_count] = id as u16;
                    online_count += 1;
                }
            })
            .is_none()
            {
                return false;
            }
            let memory_list = read_file(c"/sys/devices/system/node/has_memory", &mut buffer);
            match memory_list {
                Some(text) => {
                    for_each_in_list(text, |id| {
                        if id < with_memory.len() {
                            with_memory[id] = true;
                        }
                    });
                }
                None => with_memory[..].fill(true),
            }
        }
        let mut allowed = [true; MAX_NODES * 4];
        // The cpuset's nodes: one system call, or `/proc/self/status` if the kernel refuses it
        // (a file read costs a fresh process tens of microseconds).
        let mut allowed_mask = [0u64; crate::os::cpuset::MAX_NODE_WORDS];
        if crate::os::allowed_memory_nodes(&mut allowed_mask) {
            for (id, allowed_id) in allowed.iter_mut().enumerate() {
                *allowed_id = in_node_mask(&allowed_mask, id);
            }
        } else {
            let mut status = [0u8; 4096];
            if let Some(text) = read_file(c"/proc/self/status", &mut status) {
                if let Some(list) = status_field(text, b"Mems_allowed_list:") {
                    allowed.fill(false);
                    for_each_in_list(list, |id| {
                        if id < allowed.len() {
                            allowed[id] = true;
                        }
                    });
                }
            }
        }
        // A strict task policy (`numactl --membind`) narrows the usable nodes further.
        let mut policy_mask = [0u64; crate::os::cpuset::MAX_NODE_WORDS];
        if crate::os::task_memory_policy(&mut policy_mask) == Some(crate::os::MPOL_BIND) {
            for (id, allowed_id) in allowed.iter_mut().enumerate() {
                if !in_node_mask(&policy_mask, id) {
                    *allowed_id = false;
                }
            }
        }
        let mut count = 0;
        for &id in &online[..online_count] {
            let id = id as usize;
            if id >= with_memory.len() || !with_memory[id] || !allowed[id] || count == MAX_NODES {
                continue;
            }
            let mut node = NodeInfo {
                os_id: id,
                cpus: CpuSet::new(),
                memory_bytes: 0,
            };
            if online_count == 1 {
                // The machine's one node: every CPU the process may use and all the RAM, with
                // none of the node's files read (each costs a fresh process microseconds).
                node.cpus = self.process_cpus;
                node.memory_bytes = crate::os::memory_sizes().map_or(0, |(_, ram)| ram);
                self.nodes[count] = node;
                count += 1;
                continue;
            }
            let path = PathBuffer::numbered(b"/sys/devices/system/node/node", id, b"/cpulist");
            if let Some(text) = read_file(path.as_cstr(), &mut buffer) {
                if let Some(set) = CpuSet::parse_list(text) {
                    node.cpus = set.intersection(&self.process_cpus);
                }
            }
            let path = PathBuffer::numbered(b"/sys/devices/system/node/node", id, b"/meminfo");
            if let Some(text) = read_file(path.as_cstr(), &mut buffer) {
                node.memory_bytes = meminfo_total(text).unwrap_or(0);
            }
            self.nodes[count] = node;
            count += 1;
        }
        if count == 0 {
            return false;
        }
        self.node_count = count;
        // Distances: row `nodeN/distance` lists one value per online node, in online order (the
        // one node of a one-node machine is at 10 from itself, as `reset` left it).
        for i in (0..count).filter(|_| online_count > 1) {
            let path = PathBuffer::numbered(
                b"/sys/devices/system/node/node",
                self.nodes[i].os_id,
                b"/distance",
            );
            let mut row = [0u8; MAX_NODES * 4];
            let mut row_length = 0;
            if let Some(text) = read_file(path.as_cstr(), &mut buffer) {
                for word in trim(text).split(|b| b.is_ascii_whitespace()) {
                    if let (Some(value), true) = (parse_decimal(word), row_length < row.len()) {
                        row[row_length] = value.min(255) as u8;
                        row_length += 1;
                    }
                }
            }
            for j in 0..count {
                let position = online[..online_count]
                    .iter()
                    .position(|&id| id as usize == self.nodes[j].os_id);
                self.distances[i][j] = match position {
                    Some(p) if p < row_length => row[p],
                    _ if i == j => 10,
                    _ => 20,
                };
            }
        }
        // Each CPU maps to its node; CPUs of memory-less nodes map to the nearest... node 0.
        self.cpu_to_node.fill(0);
        for node in 0..count {
            for cpu in self.nodes[node].cpus.iter() {
                self.cpu_to_node[cpu] = node as u8;
            }
        }
        true
    }
}

/// True when node `id` is in `mask` (a `get_mempolicy(2)` node mask, bit `id % 64` of word
/// `id / 64`).
fn in_node_mask(mask: &[u64; crate::os::cpuset::MAX_NODE_WORDS], id: usize) -> bool {
    id < mask.len() * 64 && mask[id / 64] & (1 << (id % 64)) != 0
}
