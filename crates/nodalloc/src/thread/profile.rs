//! The thread side of the heap profile (`crate::profile`): the count of the bytes allocations
//! ask for, once per allocation, and the sampled allocation itself.
//!
//! With profiling on the heap runs its calls through the partition lists (`partition.rs`),
//! which the fast paths never see, so every allocation reaches one of this heap's slow entries:
//! the C face's [`ThreadHeap::partition_hit`] followed, when it misses, by
//! [`ThreadHeap::alloc_after_partition_hit`]; [`ThreadHeap::alloc_slow`]; or
//! [`ThreadHeap::alloc_zeroed`]. The first of them an allocation reaches counts it
//! ([`ThreadHeap::count_allocation`]); [`SampleState`] carries what it found to the next
//! one, so that an allocation is counted once however many of them it passes.

use super::{HeapState, ThreadHeap};
use crate::profile::{self, sites};
use core::ptr::null_mut;

/// What the entry that counted an allocation found, for the entry that serves it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SampleState {
    /// The allocation in progress (if any) is not counted yet.
    Idle,
    /// Counted, and not to be sampled.
    Counted,
    /// Counted, and to be sampled.
    Due,
}

/// The C face's name for an allocation's caller, for the profile's stack: the return address
/// into it and its frame pointer (0 when unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The return address into the caller (the allocating entry point's `[rsp]`).
    pub ret: usize,
    /// The caller's frame pointer (`rbp` at the entry point).
    pub frame: usize,
    /// The bytes it asked for (0: unknown, the block's size stands in).
    pub size: usize,
}

impl ThreadHeap {
    /// Counts an allocation of `bytes` unless an earlier entry of the same allocation did;
    /// true when it is to be sampled.
    #[inline]
    pub(super) fn count_allocation(&mut self, bytes: usize) -> bool {
        match core::mem::replace(&mut self.sample_state, SampleState::Idle) {
            SampleState::Counted => false,
            SampleState::Due => true,
            SampleState::Idle => self.sampler.take(bytes),
        }
    }

    /// For an entry that counted an allocation which another entry will serve: what it found.
    pub(super) fn pass_count(&mut self, due: bool) {
        self.sample_state = if due {
            SampleState::Due
        } else {
            SampleState::Counted
        };
    }

    /// True when the heap's allocations go through the partition lists and are counted there.
    #[inline]
    pub(super) fn counts_allocations(&self) -> bool {
        self.partitions != 0 && self.state == HeapState::Active && !self.secure
    }

    /// Counts a large allocation of `bytes` (served by the caller); true when it is to be
    /// sampled ([`Self::record_sample`] once it is).
    pub(crate) fn sample_large(&mut self, bytes: usize) -> bool {
        self.counts_allocations() && self.count_allocation(bytes)
    }

    /// A sampled allocation of a block of `bytes`: a large block of its own, recorded with
    /// the caller's stack. Null when no memory is left.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_sampled(&mut self, bytes: usize) -> *mut u8 {
        let Some(heaps) = self.heaps() else {
            return null_mut();
        };
        let block = heaps.alloc_large(self.allocation_node(), bytes, 16);
        // The size the face said was asked for, if it said (and it fits the class).
        let asked = match core::mem::take(&mut self.caller.size) {
            size if size != 0 && size <= bytes => size,
            _ => bytes,
        };
        if !block.is_null() {
            self.record_sample(block, bytes, asked);
        }
        block
    }

    /// Records `block`, a large block of `bytes` just allocated for this thread for a request
    /// of `asked` bytes, as a sample of the current allocation's call stack. The probability
    /// is the block's (its size was counted); what the sample stands for is in the bytes
    /// asked for.
    pub(crate) fn record_sample(&mut self, block: *mut u8, bytes: usize, asked: usize) {
        let Some(heaps) = self.heaps() else {
            return;
        };
        let here = 0u8;
        let sp = &here as *const u8 as usize;
        if !(self.stack.0..self.stack.1).contains(&sp) {
            self.stack = profile::stack_of(sp);
        }
        let mut key = sites::Key::EMPTY;
        let (ret, frame) = if self.call_site != 0 {
            (self.caller.ret, self.caller.frame)
        } else {
            (0, frame_pointer())
        };
        profile::capture(ret, frame, self.stack, &mut key);
        let node = heaps.origin_of(block as usize).map_or(self.node, |origin| {
            heaps.placed_node(origin, block as usize)
        });
        key.node = node.index() as u16;
        key.far = heaps.topology().is_far(node.index());
        key.partition = if heaps.partitions() != 0 {
            self.current_partition().0
        } else {
            0
        };
        let (objects, weight) = profile::weights(bytes, asked, profile::rate());
        if let Some(site) = sites::site_of(&key) {
            sites::add(site, objects, weight);
            heaps.mark_sampled(block as usize, sites::index_of(site), objects, weight);
        }
    }

    /// The C face: the caller of the current allocation, for the profile's stack.
    #[inline]
    pub fn enter_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }
}

/// The caller's frame pointer as this function sees it (a Rust-face allocation: the walk
/// starts here and climbs through the allocator's own frames to the program's).
#[inline(always)]
fn frame_pointer() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let frame: usize;
        // SAFETY: reads a register, touches no memory.
        unsafe { core::arch::asm!("mov {}, rbp", out(reg) frame, options(nomem, nostack)) };
        frame
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}
