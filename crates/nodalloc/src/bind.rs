//! Thread binding: which node a thread lives on, and restricting it to that node's CPUs.
//!
//! Policies (`NODALLOC_BIND`): `interleave` (thread *i* to node *i* mod *N*), `saturate` (fill
//! node 0's CPUs, then node 1's, …), `map:FILE` (the file's *i*-th entry, cycled) and `none`
//! (the node of the CPU the thread runs on). Only nodes with CPUs receive threads; memory-only
//! nodes are reached through `alloc_on_node`.
//!
//! Binding never widens an affinity: the new mask is the node's CPUs intersected with the
//! thread's current mask, and nothing is changed when that is empty. One refinement: a thread
//! whose mask is exactly a mask nodalloc gave (inherited from the thread that created it) is
//! treated as having the process's start-up mask, or every thread created by a bound thread
//! would be stuck on its creator's node.

use crate::os::cpuset::CpuSet;
use crate::os::options::{BindPolicy, Options};
use crate::os::topology::{Topology, MAX_NODES};
use crate::os::{current_cpu, set_thread_affinity, thread_affinity};

/// The node policy `options` gives the `index`-th thread, among nodes that have CPUs.
pub fn choose_node(topology: &Topology, options: &Options, index: usize) -> usize {
    let mut with_cpus = [0u8; MAX_NODES];
    let mut count = 0;
    for node in 0..topology.node_count() {
        if !topology.node(node).cpus.is_empty() {
            with_cpus[count] = node as u8;
            count += 1;
        }
    }
    if count == 0 {
        return 0;
    }
    match options.bind {
        BindPolicy::None => current_cpu()
            .map(|cpu| topology.node_of_cpu(cpu))
            .unwrap_or(0),
        BindPolicy::Interleave => with_cpus[index % count] as usize,
        BindPolicy::Saturate => {
            let total: usize = with_cpus[..count]
                .iter()
                .map(|&n| topology.node(n as usize).cpus.count())
                .sum();
            let mut position = index % total.max(1);
            for &node in &with_cpus[..count] {
                let cpus = topology.node(node as usize).cpus.count();
                if position < cpus {
                    return node as usize;
                }
                position -= cpus;
            }
            with_cpus[0] as usize
        }
        BindPolicy::Map => {
            let wanted = options.bind_map[index % options.bind_map_length.max(1)] as usize;
            (0..topology.node_count())
                .find(|&node| {
                    topology.node(node).os_id == wanted && !topology.node(node).cpus.is_empty()
                })
                .unwrap_or(with_cpus[index % count] as usize)
        }
    }
}

/// What a thread's binding may start from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindBase {
    /// The thread's current affinity: whatever it inherited or was given. Never widened.
    Current,
    /// The process's start-up affinity: only when the thread is known to have inherited a mask
    /// that nodalloc itself set on its creator (the C library's `pthread_create` wrapper checks
    /// that fact), so restoring the wider mask undoes nodalloc's own narrowing, not the user's.
    Process,
    /// None: the program chose this thread's affinity itself (its creation attributes carry
    /// one), and nodalloc leaves it exactly as it is; the heap homes on the node it runs on.
    Kept,
}

/// The outcome of binding: the home node, and the mask nodalloc set (if it set one).
#[derive(Clone, Copy, Debug)]
pub struct Binding {
    pub node: usize,
    pub mask: Option<CpuSet>,
}

/// Binds the calling thread (the `index`-th worker to start allocating) and returns its home.
///
/// The process's main thread is never bound: every thread it creates inherits its mask, and a
/// narrowed main thread would pin them all to one node. It lives where it runs (its heap
/// follows its CPU). Nor is anything bound on one node, under `none`, or when the policy's node
/// has no CPU in the base mask.
pub fn bind_current_thread(
    topology: &Topology,
    options: &Options,
    index: usize,
    base: BindBase,
) -> Binding {
    let here = || {
        current_cpu()
            .map(|cpu| topology.node_of_cpu(cpu))
            .unwrap_or(0)
    };
    if topology.node_count() < 2
        || options.bind == BindPolicy::None
        || base == BindBase::Kept
        || is_main_thread()
    {
        return Binding {
            node: here(),
            mask: None,
        };
    }
    let node = choose_node(topology, options, index);
    let mut current = CpuSet::new();
    if !thread_affinity(&mut current) {
        return Binding {
            node: here(),
            mask: None,
        };
    }
    let base = match base {
        BindBase::Process => *topology.process_cpus(),
        BindBase::Current | BindBase::Kept => current,
    };
    let target = topology.node(node).cpus.intersection(&base);
    if target.is_empty() || (target != current && set_thread_affinity(&target).is_err()) {
        // We may not (or cannot) run there: live where we are.
        return Binding {
            node: here(),
            mask: None,
        };
    }
    Binding {
        node,
        mask: Some(target),
    }
}

fn is_main_thread() -> bool {
    // SAFETY: gettid and getpid have no preconditions.
    unsafe { libc::gettid() == libc::getpid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::options::MAX_BIND_MAP;

    fn simulated(nodes: usize) -> Box<Topology> {
        let mut topology = Box::new(Topology::single(CpuSet::new()));
        topology.detect_into(nodes);
        topology
    }

    #[test]
    fn interleave_cycles_through_the_nodes() {
        let topology = simulated(4);
        let options = Options::default();
        let nodes: Vec<usize> = (0..8)
            .map(|i| choose_node(&topology, &options, i))
            .collect();
        assert_eq!(nodes, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn saturate_fills_a_node_before_the_next() {
        let topology = simulated(2);
        let options = Options {
            bind: BindPolicy::Saturate,
            ..Options::default()
        };
        let per_node = topology.node(0).cpus.count();
        let nodes: Vec<usize> = (0..2 * per_node)
            .map(|i| choose_node(&topology, &options, i))
            .collect();
        assert!(nodes[..per_node].iter().all(|&n| n == 0));
        assert!(nodes[per_node..].iter().all(|&n| n == 1));
    }

    #[test]
    fn a_map_file_assigns_and_cycles() {
        let topology = simulated(4);
        let mut map = [0u16; MAX_BIND_MAP];
        map[..3].copy_from_slice(&[3, 3, 1]);
        let options = Options {
            bind: BindPolicy::Map,
            bind_map: map,
            bind_map_length: 3,
            ..Options::default()
        };
        let nodes: Vec<usize> = (0..6)
            .map(|i| choose_node(&topology, &options, i))
            .collect();
        assert_eq!(nodes, vec![3, 3, 1, 3, 3, 1]);
    }

    #[test]
    fn binding_never_widens_the_affinity() {
        // Run in a fresh thread so the test harness's own affinity is untouched.
        std::thread::spawn(|| {
            let topology = simulated(2);
            let options = Options::default();
            let mut original = CpuSet::new();
            assert!(thread_affinity(&mut original));
            let binding = bind_current_thread(&topology, &options, 1, BindBase::Current);
            let mut after = CpuSet::new();
            assert!(thread_affinity(&mut after));
            assert!(after.is_subset_of(&original), "affinity widened");
            assert!(after.is_subset_of(&topology.node(binding.node).cpus) || after == original);
            // A thread narrowed by the user to one node's CPUs stays inside that mask, whatever
            // node the policy would give it (this is exactly a mask binding could have set).
            for index in 0..4 {
                let mut one = topology.node(0).cpus.intersection(&original);
                if one.is_empty() {
                    one.insert(original.nth(0).unwrap());
                }
                set_thread_affinity(&one).unwrap();
                bind_current_thread(&topology, &options, index, BindBase::Current);
                let mut last = CpuSet::new();
                thread_affinity(&mut last);
                assert!(
                    last.is_subset_of(&one),
                    "index {index}: {last:?} not within {one:?}"
                );
            }
            // Only an explicit Process base may restore the start-up mask.
            let binding = bind_current_thread(&topology, &options, 1, BindBase::Process);
            let mut restored = CpuSet::new();
            thread_affinity(&mut restored);
            assert!(restored.is_subset_of(topology.process_cpus()));
            assert_eq!(binding.mask, Some(restored));
        })
        .join()
        .unwrap();
    }
}
