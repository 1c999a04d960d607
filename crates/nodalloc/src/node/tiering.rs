//! Automatic tiering by call site (`NODALLOC_TIERING=auto`): with call-site partitions on, far
//! memory present and the maintenance thread running, each partition's temperature follows
//! its activity, and its bags follow its temperature.
//!
//! **Activity** is what a partition does through the shared structures: refills of a thread's
//! partition list, returns of its objects, and its allocations from the far node while cold
//! (`PartitionInfo::activity`, one relaxed add per batch, never per object). A request site
//! allocates and frees all the time; a cache site allocates its entries and then leaves them.
//!
//! **Temperature**, decided on each upkeep pass ([`NodeHeaps::tiering_pass`]): a pass whose
//! activity reaches [`BUSY_OPS_PER_SECOND`] marks the partition busy (and hot again if it was
//! cold); a partition not busy for the cooling period (`NODALLOC_COOLING`) turns cold.
//!
//! **Placement.** A cold partition's refills come from its thread's far node (the far node's
//! own class heap of that partition, so `node_of` stays arithmetic: the thread layer asks
//! [`NodeHeaps::cold_source`]); its full bags near are moved to the far node by the pass
//! (`mbind` with `MPOL_MF_MOVE`, `Arena::move_bag`), under their class lock, on the maintenance
//! thread alone, and their descriptors record it (`BagState::moved`, which `node_of` reads, so
//! it names where the pages are). A partition that turns hot again gets its moved bags back
//! near the same way, and its refills come from its own node again. A bag belongs to one
//! partition, so it never holds two temperatures. A moved bag whose objects all come back is
//! decommitted as it returns to its region (`bags.rs`), so its span never serves another
//! partition from far memory. A bag stays charged to its region's tier, so under a tier's
//! limit (`NODALLOC_NEAR_LIMIT`, `NODALLOC_FAR_LIMIT`) no bag moves far: the limits stay exact,
//! and cold partitions still get their new bags far.
//!
//! Only size-class objects follow: large blocks are placed once, by hints.

use super::bags::is_full;
use super::*;
use crate::arena::{BagAt, BagMove};
use core::sync::atomic::{AtomicU32, AtomicUsize};

/// A partition is busy in a pass whose activity reaches this many operations a second (a
/// refill or a return moves a batch of objects).
pub const BUSY_OPS_PER_SECOND: u64 = 64;

/// The most bags one pass moves, both ways together: a pass stays short (a move is two
/// `mbind` calls and the copy of a bag's pages), and what is left waits for the next pass.
const MOVES_PER_PASS: usize = 2048;

/// The most passes between two rounds of retries. A round that completes no move waits twice
/// as long as the one before: pages a long-lived child shares stay put until it exits or
/// writes them, and each try costs three system calls a bag.
pub(super) const MAX_RETRY_WAIT: u32 = 64;

/// Automatic tiering's state in an instance.
pub(super) struct Tiering {
    /// The cooling period in ns; 0 while automatic tiering is off.
    cooling_ns: AtomicU64,
    /// When the last pass ran (monotonic ns; 0: none yet).
    last_pass: AtomicU64,
    /// Bags moved to far memory and back near, so far.
    moved_far: AtomicU64,
    moved_near: AtomicU64,
    /// The kernel refused a move: no more are tried (a warning said why).
    refused: AtomicBool,
    /// Passes to wait before the next retry of the moves left part done, and the wait a
    /// fruitless round of retries sets.
    pub(super) retry_in: AtomicU32,
    retry_wait: AtomicU32,
    /// Bags left part done at the end of the last pass (`BagState::unsettled`).
    unsettled: AtomicUsize,
    /// Moves (first tries and retries) that the kernel left part done, so far.
    moved_partly: AtomicU64,
    /// Tests: the next this many moves report [`BagMove::Partly`] (a single-node test machine
    /// moves nothing, so the kernel's partial moves are played here).
    #[cfg(test)]
    pub(super) play_partly: AtomicUsize,
}

impl Tiering {
    /// Off, nothing moved.
    pub(super) const fn off() -> Tiering {
        Tiering {
            cooling_ns: AtomicU64::new(0),
            last_pass: AtomicU64::new(0),
            moved_far: AtomicU64::new(0),
            moved_near: AtomicU64::new(0),
            refused: AtomicBool::new(false),
            retry_in: AtomicU32::new(0),
            retry_wait: AtomicU32::new(0),
            unsettled: AtomicUsize::new(0),
            moved_partly: AtomicU64::new(0),
            #[cfg(test)]
            play_partly: AtomicUsize::new(0),
        }
    }
}

impl NodeHeaps {
    /// Turns automatic tiering on with a cooling period of `cooling_ns` (0: off). It needs
    /// call-site partitions and a node with far memory; false, changing nothing, without them.
    pub(crate) fn set_tiering(&self, cooling_ns: u64) -> bool {
        if cooling_ns != 0 && (self.partitions() == 0 || !self.arena.topology.has_far_memory()) {
            return false;
        }
        self.partitions
            .tiering
            .cooling_ns
            .store(cooling_ns, Ordering::Relaxed);
        true
    }

    /// True while automatic tiering is on.
    #[inline]
    pub(crate) fn tiering_on(&self) -> bool {
        self.partitions.tiering.cooling_ns.load(Ordering::Relaxed) != 0
    }

    /// Counts one operation of `part` (a refill, a return, a far allocation) while automatic
    /// tiering is on.
    #[inline]
    pub(crate) fn note_activity(&self, part: Partition) {
        if part.0 != 0 && self.tiering_on() {
            if let Some(info) = self.partition_info(part) {
                info.activity.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Where a refill of `part` for a thread of `node` comes from while the partition is cold:
    /// `node`'s far node; `None` when it is not cold or `node` has no far node.
    #[inline]
    pub(crate) fn cold_source(&self, node: NodeId, part: Partition) -> Option<NodeId> {
        if part.0 == 0 || !self.tiering_on() {
            return None;
        }
        if !self.partition_info(part)?.cold.load(Ordering::Relaxed) {
            return None;
        }
        self.arena.topology.far_node_of(node.index()).map(NodeId)
    }

    /// True when `part` is cold now.
    pub(crate) fn is_cold(&self, part: Partition) -> bool {
        self.partition_info(part)
            .is_some_and(|info| info.cold.load(Ordering::Relaxed))
    }

    /// Bags moved to far memory and back near so far.
    pub(crate) fn bags_moved(&self) -> (u64, u64) {
        let tiering = &self.partitions.tiering;
        (
            tiering.moved_far.load(Ordering::Relaxed),
            tiering.moved_near.load(Ordering::Relaxed),
        )
    }

    /// Moves the kernel left part done so far (each try counts), and the bags still waiting for
    /// a retry after the last pass.
    pub(crate) fn moves_partly(&self) -> (u64, usize) {
        let tiering = &self.partitions.tiering;
        (
            tiering.moved_partly.load(Ordering::Relaxed),
            tiering.unsettled.load(Ordering::Relaxed),
        )
    }

    /// One pass of automatic tiering at `now` (monotonic ns), from the maintenance thread:
    /// each used partition's temperature from its activity since the last pass, then the
    /// moves its bags need.
    pub(crate) fn tiering_pass(&self, now: u64) {
        let cooling = self.partitions.tiering.cooling_ns.load(Ordering::Relaxed);
        if cooling == 0 {
            return;
        }
        let last = self
            .partitions
            .tiering
            .last_pass
            .swap(now, Ordering::Relaxed);
        let elapsed = now.saturating_sub(last);
        for index in 1..self.partitions() {
            let Some(info) = self.partition_info(Partition(index as u16)) else {
                break;
            };
            let activity = info.activity.load(Ordering::Relaxed);
            if activity == 0 {
                continue; // never used
            }
            let delta = activity - info.seen.swap(activity, Ordering::Relaxed);
            let busy = last != 0
                && elapsed != 0
                && delta.saturating_mul(1_000_000_000)
                    >= BUSY_OPS_PER_SECOND.saturating_mul(elapsed);
            if busy || info.busy_at.load(Ordering::Relaxed) == 0 {
                info.busy_at.store(now, Ordering::Relaxed);
            }
            let cold = info.cold.load(Ordering::Relaxed);
            if busy && cold {
                info.cold.store(false, Ordering::Relaxed);
            } else if !busy
                && !cold
                && now.saturating_sub(info.busy_at.load(Ordering::Relaxed)) >= cooling
            {
                info.cold.store(true, Ordering::Relaxed);
            }
        }
        self.move_bags();
    }

    /// Moves the bags whose place differs from their partition's temperature, up to
    /// [`MOVES_PER_PASS`]: full bags of cold partitions to their node's far node, moved bags of
    /// hot partitions back, and (when their wait is over) the bags whose last move the kernel
    /// left part done, again.
    fn move_bags(&self) {
        let tiering = &self.partitions.tiering;
        if tiering.refused.load(Ordering::Relaxed) {
            return;
        }
        let mut budget = MOVES_PER_PASS;
        let wait = tiering.retry_in.load(Ordering::Relaxed);
        let retrying = wait == 0;
        if !retrying {
            tiering.retry_in.store(wait - 1, Ordering::Relaxed);
        }
        let (mut retried, mut completed, mut unsettled) = (0usize, 0usize, 0usize);
        // A bag stays charged to its region's tier: under a tier's limit, one moved far would
        // hold far memory the far limit does not count (and near memory the near limit still
        // does). So with a limit set, bags only come back; cold partitions still refill far.
        let limited = self.arena.tier_limited();
        for node in self.nodes() {
            let Some(far) = self.arena.topology.far_node_of(node.index()) else {
                continue;
            };
            self.arena.for_each_bag(node.index(), |bag| {
                let Some((part, moved, left)) = self.peek_bag(bag) else {
                    return;
                };
                let cold = self.is_cold(part);
                let first = cold != moved;
                if (!first && !left) || (cold && limited) {
                    return;
                }
                if budget == 0 || tiering.refused.load(Ordering::Relaxed) || !(first || retrying) {
                    unsettled += left as usize;
                    return;
                }
                let to = if cold { far } else { node.index() };
                let Some(result) = self.move_one(node, part, bag, to, cold, first) else {
                    return;
                };
                budget -= 1;
                unsettled += (result == BagMove::Partly) as usize;
                if !first {
                    retried += 1;
                    completed += (result == BagMove::Done) as usize;
                } else if result != BagMove::Refused {
                    let counter = if cold {
                        &tiering.moved_far
                    } else {
                        &tiering.moved_near
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        tiering.unsettled.store(unsettled, Ordering::Relaxed);
        if retrying {
            // A round that completes no retry waits twice as long as the one before.
            let next = if retried > 0 && completed == 0 {
                (tiering.retry_wait.load(Ordering::Relaxed) * 2).clamp(1, MAX_RETRY_WAIT)
            } else {
                0
            };
            tiering.retry_wait.store(next, Ordering::Relaxed);
            tiering.retry_in.store(next, Ordering::Relaxed);
        }
    }

    /// The partition, `moved` and `unsettled` marks of `bag`, read without its lock (so
    /// volatile: a peek, checked again under the lock); `None` for a bag of no partition.
    fn peek_bag(&self, bag: BagAt) -> Option<(Partition, bool, bool)> {
        let meta = self.arena.map().meta(bag.first);
        // SAFETY: the caller found `meta` heading a bag; the fields are plain bytes, any value
        // is checked below and again under the lock.
        let (part, moved, unsettled) = unsafe {
            (
                core::ptr::addr_of!((*meta).role.bag.partition).read_volatile(),
                core::ptr::addr_of!((*meta).role.bag.moved).read_volatile(),
                core::ptr::addr_of!((*meta).role.bag.unsettled).read_volatile(),
            )
        };
        if part == 0 || part as usize >= self.partitions() {
            return None;
        }
        Some((Partition(part), moved, unsettled))
    }

    /// Moves `bag` of `node`'s region, a bag of `part`, to node `to` (far when `far`, else
    /// home) under its class lock, when it is still that partition's bag and, on a `first`
    /// try, marked the other way and (to go far) full: its objects are all out, none is handed
    /// out from it meanwhile; on a retry, marked this way and left part done. Marks it moved
    /// (or not) by where most of it went, and unsettled when the kernel left some of its pages;
    /// a refusal stops automatic tiering's moves, with a warning. `None` when the bag was no
    /// longer what the caller saw.
    fn move_one(
        &self,
        node: NodeId,
        part: Partition,
        bag: BagAt,
        to: usize,
        far: bool,
        first: bool,
    ) -> Option<BagMove> {
        let tiering = &self.partitions.tiering;
        let map = self.arena.map();
        let meta = map.meta(bag.first);
        let class_heap = self.class_in(node, part, bag.class);
        let _guard = class_heap.lock_counted(&self.node(node).ops);
        let tag = map.tag(bag.start);
        // SAFETY: the class lock of the bag's class heap is held (if the tag still says it is
        // that class's bag).
        let current = tag.is_bag()
            && tag.offset_units() == 0
            && tag.class() == bag.class
            && unsafe {
                let state = &(*meta).role.bag;
                state.partition == part.0
                    && if first {
                        state.moved != far && (!far || is_full(meta, bag.class.capacity() as u16))
                    } else {
                        state.moved == far && state.unsettled
                    }
            };
        if !current {
            return None;
        }
        let result = self.arena.move_bag(bag.start, bag.class.bag_bytes(), to);
        #[cfg(test)]
        let result = match result {
            BagMove::Done
                if tiering
                    .play_partly
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok() =>
            {
                BagMove::Partly
            }
            other => other,
        };
        if result == BagMove::Refused {
            tiering.refused.store(true, Ordering::Relaxed);
            os::warn(|w| {
                w.str("the kernel refused to move pages (mbind MPOL_MF_MOVE); ")
                    .str("automatic tiering places new bags only");
            });
            return Some(result);
        }
        let partly = result == BagMove::Partly;
        if partly {
            tiering.moved_partly.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the class lock is held and the bag is this class heap's.
        unsafe {
            (*meta).role.bag.moved = far;
            (*meta).role.bag.unsettled = partly;
        }
        Some(result)
    }

    /// The node whose memory holds the small object at `address` of `origin`'s region: the
    /// far node of `origin` when its bag was moved there, else `origin`.
    pub(crate) fn placed_node(&self, origin: NodeId, address: usize) -> NodeId {
        if !self.tiering_on() {
            return origin;
        }
        let Some(bag) = self.arena.bag_at(address) else {
            return origin;
        };
        let meta = self.arena.map().meta(bag.first);
        // SAFETY: the tag says `meta` heads a bag; a racing move makes the answer one pass
        // old, as any answer about placement is.
        let moved = unsafe { core::ptr::addr_of!((*meta).role.bag.moved).read_volatile() };
        match self.arena.topology.far_node_of(origin.index()) {
            Some(far) if moved => NodeId(far),
            _ => origin,
        }
    }
}
