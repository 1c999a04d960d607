//! The thread side of the heap profile (`crate::profile`): the count of the bytes allocations
//! ask for, once per allocation, and the sampled allocation itself.
//!
//! Two ways of counting, one per mode of the heap:
//!
//! - **Lean mode** (call-site partitions off, the usual case): the class lists serve as
//!   always, and the fast paths' instructions are those of profiling off. What makes it
//!   possible: each class is sampled on its own, with a budget of allocations up to and
//!   including its next sample, drawn from the geometric law that sampling every allocation
//!   with probability `1 − e^(−size/rate)` gives (independent per class, the samples of all
//!   classes together are still one sampling by bytes at `rate`: unbiased). A list's pops are
//!   counted exactly by what it keeps for the statistics (`FreeList::pops_since_publish`), so a
//!   slow entry knows how much of the budget the fast paths spent. The list is kept shorter than
//!   the budget (`lean_enforce` moves a list that reaches it whole to the class's stash, which
//!   the class's next miss takes from before the node heap: `lean_unstash`), and frees take the
//!   slow path (the home view is empty), where that is checked again: the pops between two slow
//!   entries can never exceed the budget, and the allocation that reaches zero finds the list
//!   empty, misses, and is the sample.
//! - **With call-site partitions** the heap runs its calls through the partition lists
//!   (`partition.rs`), which the fast paths never see, so every allocation reaches one of this
//!   heap's slow entries: the C face's [`ThreadHeap::partition_hit`] followed, when it misses,
//!   by [`ThreadHeap::alloc_after_partition_hit`]; [`ThreadHeap::alloc_slow`]; or
//!   [`ThreadHeap::alloc_zeroed`]. The first of them an allocation reaches counts it by bytes
//!   ([`ThreadHeap::count_allocation`]); [`SampleState`] carries what it found to the next
//!   one, so that an allocation is counted once however many of them it passes.
//!
//! Large allocations are counted by bytes in both modes (`sample_large`).

use super::{HeapState, ThreadHeap};
use crate::node::NodeHeaps;
use crate::profile::{self, sites};
use crate::size_class::SizeClass;
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
        (self.counts_allocations() || self.lean_counts()) && self.count_allocation(bytes)
    }

    /// True when the heap counts through its class lists (lean mode, attached).
    #[inline]
    pub(super) fn lean_counts(&self) -> bool {
        self.lean && self.state == HeapState::Active
    }

    /// Lean mode's start on attach: a budget for each class that has none yet (a heap the pool
    /// kept keeps its budgets and lists), counted from the lists' pops as they are now.
    pub(super) fn start_lean(&mut self) {
        for index in 0..self.lists.len() {
            if self.budget[index] == 0 {
                let size = crate::size_class::SizeClass(index as u8).size();
                self.budget[index] = self.sampler.draw_objects(size);
            }
            self.seen[index] = self.lists[index].pops_since_publish();
        }
    }

    /// Takes the pops of `class`'s list since the last count off its budget; returns them.
    fn lean_sync(&mut self, class: SizeClass) -> u32 {
        let index = class.index();
        let pops = self.lists[index].pops_since_publish();
        let spent = pops.wrapping_sub(self.seen[index]);
        self.seen[index] = pops;
        // Never below 1: a list is kept shorter than its budget, so the pops since the last
        // count leave at least the allocation that is due (a path that lengthened a list
        // without `lean_enforce` makes the next allocation the sample, a little late).
        self.budget[index] = self.budget[index].saturating_sub(spent).max(1);
        spent
    }

    /// The lists' counts are about to be published (their pop counts restart at zero).
    pub(super) fn lean_before_publish(&mut self, class: SizeClass) {
        if self.lean {
            self.lean_sync(class);
        }
    }

    /// The lists' counts were published: their pop counts start from zero. Outside the lean
    /// mode, nothing (the array's page stays untouched: see `ThreadHeap::init`).
    pub(super) fn lean_after_publish(&mut self, class: SizeClass) {
        if self.lean {
            self.seen[class.index()] = 0;
        }
    }

    /// Lean mode, a slow entry of an allocation of `class`: true when it is the sample (its
    /// class's budget is down to it; the list is then empty, or a path lengthened it past the
    /// budget).
    pub(super) fn lean_due(&mut self, class: SizeClass) -> bool {
        self.lean_sync(class);
        self.budget[class.index()] == 1
    }

    /// Lean mode, after a slow entry served an allocation of `class` that was not the sample:
    /// counted (by its pop, or here when the path served it without popping the list), and the
    /// list brought under the budget.
    pub(super) fn lean_served(&mut self, class: SizeClass) {
        if self.lean_sync(class) == 0 {
            let budget = &mut self.budget[class.index()];
            *budget = budget.saturating_sub(1).max(1);
        }
        self.lean_enforce(class);
    }

    /// Lean mode, the sample of `class` was taken: the next budget, counted from here (a sample
    /// that stayed in its bag was popped from the list: that pop was the sample's).
    pub(super) fn lean_sampled(&mut self, class: SizeClass) {
        self.seen[class.index()] = self.lists[class.index()].pops_since_publish();
        self.budget[class.index()] = self.sampler.draw_objects(class.size());
        self.lean_enforce(class);
    }

    /// Lean mode: the class of `object` when a free may push it onto this heap's list (what the
    /// free fast path's home check finds with profiling off: a small object of the heap's node
    /// at an object boundary); `None`, touching nothing, for anything else and outside the mode.
    #[inline]
    pub fn lean_class_of(&self, object: *const u8) -> Option<SizeClass> {
        self.lean_home
            .bag_object_unsampled(object, |class| self.lists[class.index()].start_magic)
            .map(|(class, _)| class)
    }

    /// Keeps `class`'s list shorter than its budget: a list that reaches it moves to the
    /// class's stash ([`Self::lean_trim`]). After every slow path that may lengthen the list (a
    /// face's free path that pushed onto it calls it); nothing outside the lean mode.
    #[inline]
    pub fn lean_enforce(&mut self, class: SizeClass) {
        if !self.lean {
            return;
        }
        let index = class.index();
        // The list's length plus its pops since the last count.
        let held = self.lists[index]
            .pops_and_len()
            .wrapping_sub(self.seen[index]);
        if held < self.budget[index] {
            return;
        }
        self.lean_trim(class);
    }

    /// [`Self::lean_enforce`] for a list that reaches its budget: the whole list moves to the
    /// class's stash in one splice (no walk here), and the class's next allocation misses and
    /// takes back what the budget allows ([`Self::lean_unstash`]), so a walk is paid only over
    /// objects about to be handed out. Cutting the list itself walked it on the free that
    /// reached the budget and gave the cut to the node heap, whose refills brought it back:
    /// 2× the time of profiling off in a producer/consumer benchmark.
    #[cold]
    #[inline(never)]
    fn lean_trim(&mut self, class: SizeClass) {
        if !self.lean_counts() {
            return;
        }
        self.lean_sync(class);
        let index = class.index();
        if (self.lists[index].len() as u32) < self.budget[index] {
            return;
        }
        let Some(heaps) = self.heaps() else { return };
        let batch = self.lists[index].take_all(false);
        // The move changed the count, not the pops.
        self.seen[index] = self.lists[index].pops_since_publish();
        // The stash holds at most what the list may (its limit); older objects past that go
        // back to the node heap, as the list's own cut sends them.
        let cap = self.lists[index].limit().max(1);
        let stash = &mut self.stash[index];
        if stash.count == 0 {
            *stash = batch;
        } else if stash.count + batch.count <= cap {
            // SAFETY: the batch's tail is a free object of this class, ours; the stash's
            // objects follow it.
            unsafe { heaps.write_link(batch.tail, stash.head) };
            stash.head = batch.head;
            stash.count += batch.count;
        } else {
            let old = core::mem::replace(stash, batch);
            self.give_back(heaps, crate::node::Partition::DEFAULT, class, old, false);
        }
    }

    /// Lean mode, a miss of `class` that is not the sample, with the list empty: moves the
    /// stash's newest objects onto the list, up to half of what the budget allows (room for as
    /// many frees as it moved before the next trim); true when it moved any.
    pub(super) fn lean_unstash(&mut self, class: SizeClass) -> bool {
        let index = class.index();
        let count = self.stash[index].count;
        if count == 0 || !self.lists[index].head.is_null() || !self.lean_counts() {
            return false;
        }
        let Some(heaps) = self.heaps() else {
            return false;
        };
        let take = count.min((self.budget[index].saturating_sub(1) / 2).max(1) as usize);
        let stash = &mut self.stash[index];
        let head = stash.head;
        let mut last = head;
        for _ in 1..take {
            // SAFETY: the stash's objects are free objects of this class, ours, `count` of
            // them linked from its head.
            last = unsafe { heaps.read_link(last, class) };
        }
        // SAFETY: as above; the list ends at `last`, the stash goes on after it.
        unsafe {
            stash.head = heaps.read_link(last, class);
            heaps.write_link(last, null_mut());
        }
        stash.count -= take;
        if stash.count == 0 {
            stash.tail = null_mut();
        }
        self.lists[index].install(
            crate::node::Batch {
                head,
                tail: last,
                count: take,
            },
            false,
        );
        true
    }

    /// A sampled allocation of `class`, recorded with the caller's stack: in lean mode an object
    /// of the class like any other, whose sample its unit's slot keeps (`profile/in_bag.rs`);
    /// else, or when that unit holds a sample already, a large block of its own. Null when no
    /// memory is left.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_sampled(&mut self, class: SizeClass) -> *mut u8 {
        let Some(heaps) = self.heaps() else {
            return null_mut();
        };
        let bytes = class.size();
        // The size the face said was asked for, if it said (and it fits the class).
        let asked = match core::mem::take(&mut self.caller.size) {
            size if size != 0 && size <= bytes => size,
            _ => bytes,
        };
        if self.lean_counts() {
            let object = self.alloc_uncounted(class);
            if object.is_null() || self.record_in_bag(object, class, asked) {
                return object;
            }
            // Its unit holds another sample: the object goes back (to the list, or to its node
            // when a far scope served it), and the sample is a large block.
            // SAFETY: an object of this class just allocated by this heap, never handed out.
            unsafe { self.free(object, class) };
            self.untouched = false;
        }
        let block = heaps.alloc_large(self.allocation_node(), bytes, 16);
        if !block.is_null() {
            self.record_sample(block, bytes, asked);
        }
        block
    }

    /// A block first-class heap `heap` just handed out for a request of `size` bytes at
    /// `align` (`zero`: read as zero), on this thread: counted on the thread's sampler (as its
    /// `malloc`s are), and recorded when it is the sample, labelled with the heap's partition:
    /// a small object in its unit's slot (`profile/in_bag.rs`), a large block in its
    /// descriptor. Returns the block to hand out: a small sample whose unit holds a sample
    /// already becomes a large block of the heap (the object goes back), as in lean mode.
    /// Nothing with profiling off.
    pub fn sample_owned(
        &mut self,
        block: *mut u8,
        size: usize,
        align: usize,
        zero: bool,
        heap: crate::node::OwnedId,
    ) -> *mut u8 {
        if block.is_null() || !profile::is_on() {
            return block;
        }
        if self.state == HeapState::Fresh && !self.run_attach_hook() {
            return block;
        }
        let Some(heaps) = self.heaps() else {
            return block;
        };
        // A small object counts its class's bytes, as the class lists count theirs.
        let class = heaps.small_class_at(block as usize).ok().flatten();
        if !self.sampler.take(class.map_or(size, SizeClass::size)) {
            return block;
        }
        self.record_owned(block, size, align, zero, class, heap)
    }

    #[cold]
    #[inline(never)]
    fn record_owned(
        &mut self,
        block: *mut u8,
        size: usize,
        align: usize,
        zero: bool,
        class: Option<SizeClass>,
        heap: crate::node::OwnedId,
    ) -> *mut u8 {
        let part = Some(heap.partition().0);
        let Some(site) = self.sample_site(block, part) else {
            return block;
        };
        let Some(heaps) = self.heaps() else {
            return block;
        };
        let Some(class) = class else {
            keep_large(heaps, site, block, size, size);
            return block;
        };
        let asked = size.min(class.size());
        if keep_in_bag(heaps, site, block, class, asked) {
            return block;
        }
        let large = heaps.owned_alloc_large_block(heap, size, align, zero);
        let Some(origin) = heaps.origin_of(block as usize).filter(|_| !large.is_null()) else {
            // No room for it: the object goes out unrecorded.
            return block;
        };
        // SAFETY: an object of `class` that heap `heap` handed out just now, never the
        // program's.
        unsafe { heaps.owned_free_small(origin, class, block) };
        // The probability is the class's, whose bytes were counted.
        keep_large(heaps, site, large, class.size(), asked);
        large
    }

    /// The site of a sample at `block`, just allocated: the current allocation's call stack
    /// and the block's placement, with partition `part` when a first-class heap serves it.
    /// `None` when the site table cannot be mapped.
    fn sample_site(&mut self, block: *mut u8, part: Option<u16>) -> Option<&'static sites::Site> {
        let heaps = self.heaps()?;
        let here = 0u8;
        let sp = &here as *const u8 as usize;
        if !(self.stack.0..self.stack.1).contains(&sp) {
            self.stack = profile::stack_of(sp);
        }
        let mut key = sites::Key::EMPTY;
        // The C face's caller, entered by its entry points' stubs (its heap API's too).
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
        key.partition = match part {
            Some(part) => part,
            None if heaps.partitions() != 0 => self.current_partition().0,
            None => 0,
        };
        sites::site_of(&key)
    }

    /// Records `block`, a large block of `bytes` just allocated for this thread for a request
    /// of `asked` bytes, as a sample of the current allocation's call stack. The probability
    /// is the block's (its size was counted); what the sample stands for is in the bytes
    /// asked for.
    pub(crate) fn record_sample(&mut self, block: *mut u8, bytes: usize, asked: usize) {
        let Some(site) = self.sample_site(block, None) else {
            return;
        };
        if let Some(heaps) = self.heaps() {
            keep_large(heaps, site, block, bytes, asked);
        }
    }

    /// Records `object`, an object of `class` just allocated for a request of `asked` bytes,
    /// as a sample that stays in its bag; false, recording nothing, when its unit holds a
    /// sample already.
    fn record_in_bag(&mut self, object: *mut u8, class: SizeClass, asked: usize) -> bool {
        let Some(site) = self.sample_site(object, None) else {
            // No table: the allocation goes unrecorded.
            return true;
        };
        match self.heaps() {
            Some(heaps) => keep_in_bag(heaps, site, object, class, asked),
            None => true,
        }
    }

    /// The C face: the caller of the current allocation, for the profile's stack.
    #[inline]
    pub fn enter_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }
}

/// Records `object`, of `class`, as a sample of `site` for `asked` bytes that stays in its bag
/// (its unit's slot, `profile/in_bag.rs`); false, recording nothing, when the unit holds a
/// sample already.
fn keep_in_bag(
    heaps: &NodeHeaps,
    site: &sites::Site,
    object: *mut u8,
    class: SizeClass,
    asked: usize,
) -> bool {
    if !heaps.claim_sample(object as usize, class, sites::index_of(site), asked) {
        return false;
    }
    // The weights `in_bag::forget` takes off again, from the same figures.
    let (objects, weight) = profile::weights(class.size(), asked, profile::rate());
    sites::add(site, objects, weight);
    true
}

/// Records `block`, a large block, as a sample of `site` standing for an allocation of `bytes`
/// (the bytes counted, whose probability it had) asked as `asked`, marked in its descriptor.
fn keep_large(heaps: &NodeHeaps, site: &sites::Site, block: *mut u8, bytes: usize, asked: usize) {
    let (objects, weight) = profile::weights(bytes, asked, profile::rate());
    sites::add(site, objects, weight);
    heaps.mark_sampled(block as usize, sites::index_of(site), objects, weight);
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
