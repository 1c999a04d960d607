//! Weighted interleave of large blocks (`NODALLOC_INTERLEAVE`): a large block of at least
//! [`INTERLEAVE_MIN_BYTES`] spreads its pages over its region's node and that node's far nodes,
//! as the kernel's weights say (`MPOL_WEIGHTED_INTERLEAVE`, Linux 6.9): bandwidth from both
//! tiers for big buffers, in the proportions the machine's owner set. The block still belongs to
//! its region (`node_of` names the region's node, its free goes there); its pages are where the
//! kernel put them. When the block is freed its span gets the region's policy back before it
//! returns to the pool, so later blocks carved from it are placed as the region's always are.
//!
//! Off by default: nodalloc keeps a thread's memory on its node. The mode is chosen at
//! start-up: `auto` interleaves when the kernel has weights and they were set (not all equal),
//! `weighted` whenever a node has far memory; a kernel without the mode (no weights directory,
//! and `EINVAL`) falls back to plain interleave, with one warning. Never on one node or a simulated
//! topology, which issue no `mbind`.

use super::*;
use crate::os::options::INTERLEAVE_MIN_BYTES;
use core::sync::atomic::AtomicI32;

impl Arena {
    /// The interleave mode for `config` on `topology`: an `mbind` mode, or 0 for none.
    pub(super) fn interleave_mode(config: &ArenaConfig, topology: &Topology) -> i32 {
        if topology.is_simulated() || topology.node_count() < 2 || !topology.has_far_memory() {
            return 0;
        }
        match config.interleave {
            InterleaveChoice::Off => 0,
            InterleaveChoice::Auto if !topology.interleave_weights_set() => 0,
            InterleaveChoice::Auto | InterleaveChoice::Weighted => os::MPOL_WEIGHTED_INTERLEAVE,
        }
    }

    /// True when large blocks are interleaved.
    pub fn interleaves(&self) -> bool {
        self.interleave.load(Ordering::Relaxed) != 0
    }

    /// Spreads the pages of the large block of `bytes` at `address` (just carved from `node`'s
    /// region, nothing touched yet by the program) over `node` and its far nodes; true when it
    /// did. Blocks below [`INTERLEAVE_MIN_BYTES`], nodes without far memory and a refused
    /// `mbind` leave the block as it is.
    pub fn interleave_large(&self, node: usize, address: usize, bytes: usize) -> bool {
        let mode = self.interleave.load(Ordering::Relaxed);
        if mode == 0 || bytes < INTERLEAVE_MIN_BYTES || self.topology.is_far(node) {
            return false;
        }
        let mut nodes = [0usize; MAX_NODES];
        nodes[0] = self.topology.node(node).os_id;
        let mut count = 1;
        for other in (0..self.node_count).filter(|&other| self.topology.is_far(other)) {
            nodes[count] = self.topology.node(other).os_id;
            count += 1;
        }
        if count == 1 {
            return false;
        }
        let mut result = os::bind_memory_to(address as *mut u8, bytes, mode, &nodes[..count]);
        // EINVAL from a kernel that has the weights is another refusal (the block stays as it
        // is); from one without them, the mode is missing.
        let no_weights = self.topology.interleave_weight(node).is_none();
        if result == Err(libc::EINVAL) && mode == os::MPOL_WEIGHTED_INTERLEAVE && no_weights {
            // A kernel without weighted interleave: plain interleave from now on.
            if swap_mode(&self.interleave, mode, os::MPOL_INTERLEAVE) {
                os::warn(|w| {
                    w.str("this kernel has no weighted interleave (Linux 6.9+); large blocks are ")
                        .str("interleaved evenly over their node and its far nodes");
                });
            }
            result = os::bind_memory_to(
                address as *mut u8,
                bytes,
                os::MPOL_INTERLEAVE,
                &nodes[..count],
            );
        }
        result.is_ok()
    }

    /// Gives the span of a freed interleaved block (`bytes` at `address`) its region's policy
    /// back (the region's bind mode to its node), before it returns to the pool.
    pub fn restore_region_policy(&self, address: usize, bytes: usize) {
        let Some(node) = self.origin_of(address) else {
            return;
        };
        let mode = if self.strict {
            os::MPOL_BIND
        } else {
            os::MPOL_PREFERRED
        };
        // A refusal leaves the interleave in place: placement only, never correctness.
        let _ = os::bind_memory(
            address as *mut u8,
            bytes,
            mode,
            self.topology.node(node).os_id,
        );
    }
}

/// Replaces `from` with `to` in `mode`; true for the caller that made the change.
fn swap_mode(mode: &AtomicI32, from: i32, to: i32) -> bool {
    mode.compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::topology::test_machine;

    fn config(interleave: InterleaveChoice) -> ArenaConfig {
        crate::arena::tests::test_config(interleave)
    }

    #[test]
    fn large_blocks_interleave_where_there_is_far_memory_and_the_choice_allows() {
        use InterleaveChoice::*;
        let weighted = os::MPOL_WEIGHTED_INTERLEAVE;
        // Two CPU nodes and a far one, weights set: auto and weighted interleave, off does not.
        let tiered = test_machine(&[2, 2, 0], 30, &[3, 3, 1]);
        assert_eq!(Arena::interleave_mode(&config(Auto), &tiered), weighted);
        assert_eq!(Arena::interleave_mode(&config(Weighted), &tiered), weighted);
        assert_eq!(Arena::interleave_mode(&config(Off), &tiered), 0);
        // Weights the kernel has but nobody set (all 1), or no weights: only `weighted`.
        for weights in [&[1u8, 1, 1][..], &[]] {
            let unset = test_machine(&[2, 2, 0], 30, weights);
            assert_eq!(Arena::interleave_mode(&config(Auto), &unset), 0);
            assert_eq!(Arena::interleave_mode(&config(Weighted), &unset), weighted);
        }
        // No far memory: nothing to interleave with, whatever the choice.
        for cpus in [&[2][..], &[1, 1]] {
            let near = test_machine(cpus, 30, &[3, 1]);
            assert_eq!(Arena::interleave_mode(&config(Weighted), &near), 0);
        }
    }
}
