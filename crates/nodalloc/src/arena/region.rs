//! A node region's span pool: the memory of one node, handed out in whole units.
//!
//! The region grows a **frontier** through its reserved range in 2 MiB chunks (each can be one
//! transparent huge page, and all threads of the node carve their bags from the same chunks:
//! NUMAlloc's incremental sharing of huge pages). Freed spans go into size **buckets** and
//! coalesce with free neighbours of the same state, found through the page map's boundary tags.
//!
//! Free spans are either **dirty** (still committed: reusing them costs no page fault) or
//! **clean** (decommitted with `MADV_DONTNEED`). Dirty spans sit on an age list; the oldest are
//! decommitted once they have been free for the decommit delay *and* the node holds more dirty
//! bytes than its retained budget. This is the large-object cache and the bag pool at once.
//!
//! Everything mutable sits behind the region's span lock. The few counters read by `stats()`
//! are atomics written under the lock.

use super::pagemap::{AgeLinks, Aside, Kind, PageMap, Tag, UnitMeta};
use super::round_up;
use crate::ds::spinlock::SpinLock;
use crate::os;
use crate::size_class::{SizeClass, MAX_BAG_UNITS, UNIT, UNIT_SHIFT};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Free committed (dirty) bytes beyond the retained budget may wait out the decommit delay only
/// while they are at most 1/DIRTY_SHARE of the bytes in use.
const DIRTY_SHARE: usize = 64;

/// Non-empty buckets searched for a dirty span after a clean one that fits was found.
const DIRTY_SEARCH_BUCKETS: usize = 3;

/// Units per 2 MiB chunk, the step by which the frontier advances.
pub const CHUNK_UNITS: usize = 64;
const CHUNK_BYTES: usize = CHUNK_UNITS * UNIT;
/// Exact-size buckets for spans up to a chunk, then one bucket per power of two.
const EXACT_BUCKETS: usize = MAX_BAG_UNITS;
const NUM_BUCKETS: usize = 128;

/// Chunks of one fullness level the filler looks into before trying the next level down.
const FILLER_TRIES: usize = 4;

/// The filler's record of one chunk of a dense pool: units in use, and the chunk's links in the
/// list of chunks with that many units in use (chunk index + 1; 0 ends the list).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ChunkNode {
    used: u32,
    prev: u32,
    next: u32,
}

/// What a span is handed out for; decides the tags written over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanUse {
    Bag(SizeClass),
    Large,
}

struct PoolState {
    frontier: usize,
    buckets: [*mut UnitMeta; NUM_BUCKETS],
    nonempty: u128,
    oldest: *mut UnitMeta,
    newest: *mut UnitMeta,
    dirty_bytes: usize,
    /// The largest span freed since frees last paused for a decommit delay, and when the last
    /// free happened: twice that much dirty memory may wait out the delay whatever the heap's
    /// size, so a program that frees and re-allocates big blocks reuses them without faults.
    recent_free: usize,
    recent_free_at: u64,
    /// The filler (dense pools): per count of units in use, the first chunk of that list
    /// (chunk index + 1, 0: empty), and a bit per non-empty list.
    fullness: [u32; CHUNK_UNITS + 1],
    fullness_nonempty: u128,
}

pub struct Region {
    lock: SpinLock,
    state: UnsafeCell<PoolState>,
    start: usize,
    end: usize,
    /// The reservation is `PROT_NONE` and each stretch the frontier passes is committed first
    /// (`vm.overcommit_memory=2`, where a writable reservation would be charged in full).
    commit_on_demand: bool,
    /// The frontier, readable without the lock: tags past it may be inaccessible.
    frontier_hint: AtomicUsize,
    /// The arena's commit budget (lives in the arena header, as long as the region).
    budget: *const CommitBudget,
    /// Chunks at and after this address may be backed by transparent huge pages (usize::MAX:
    /// none may), so decommitting part of one must first take it off huge pages; see `purge`.
    huge_from: usize,
    /// One bit per chunk of the region (span lock): set while the chunk is advised
    /// `MADV_NOHUGEPAGE` because part of it was decommitted.
    small_chunks: *mut u64,
    /// The filler's per-chunk records (null: this pool takes free spans best-fit only). A dense
    /// pool hands each new bag to the fullest chunk that has room, so its small objects occupy
    /// as few huge pages as possible and chunks that empty go back to the OS whole.
    chunk_nodes: *mut ChunkNode,
    /// Bytes the frontier has passed (address space in use or once used).
    pub mapped: AtomicUsize,
    /// Bytes handed out or free-but-dirty: an upper bound of the region's resident memory.
    pub committed: AtomicUsize,
    /// Bytes of spans currently handed out (bags and large objects).
    pub active: AtomicUsize,
    /// Bytes returned to the OS so far.
    pub decommitted: AtomicUsize,
}

// SAFETY: `state` is only touched with `lock` held; the rest is immutable after `init` or atomic.
unsafe impl Sync for Region {}

/// The optional hard limit on committed bytes, shared by every region of an arena. Charging is a
/// compare-and-swap loop, so concurrent regions can never overshoot the limit together.
pub struct CommitBudget {
    /// 0: no limit.
    pub limit: AtomicUsize,
    pub charged: AtomicUsize,
    /// The most ever charged at once.
    pub peak: AtomicUsize,
}

impl CommitBudget {
    pub fn try_charge(&self, bytes: usize) -> bool {
        let mut charged = self.charged.load(Ordering::Relaxed);
        loop {
            let limit = self.limit.load(Ordering::Relaxed);
            let Some(total) = charged.checked_add(bytes) else {
                return false;
            };
            if limit != 0 && total > limit {
                return false;
            }
            match self.charged.compare_exchange_weak(
                charged,
                total,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(total, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => charged = seen,
            }
        }
    }

    pub fn uncharge(&self, bytes: usize) {
        self.charged.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Marker in a large span's `live` field (unused by large spans otherwise): the span's memory is
/// known to read as zero (fresh from the frontier or decommitted), so `calloc` need not clear it.
pub const ZEROED: u32 = 1;

/// Marker in a bag's `freed_at` field (unused by bags outside secure mode): the bag's memory
/// read as zero when it was taken (fresh or decommitted), so an object carved from it for the
/// first time is zero but for the link word carving wrote (`calloc` need not clear it).
pub const BAG_ZEROED: u64 = 1;

/// Decommit policy, from the options.
#[derive(Clone, Copy, Debug)]
pub struct DecommitPolicy {
    pub delay_ns: u64,
    pub retain_bytes: usize,
}

fn bucket_of(units: usize) -> usize {
    if units <= EXACT_BUCKETS {
        units - 1
    } else {
        let log = (usize::BITS - 1 - units.leading_zeros()) as usize; // 2^log <= units
        (EXACT_BUCKETS + log - 6).min(NUM_BUCKETS - 1)
    }
}

impl Region {
    /// Sets the range of a zeroed region. Must run before the region is shared.
    ///
    /// # Safety
    /// `this` must point to zeroed memory for a `Region` that nobody else uses yet.
    /// `small_chunks` must point to zeroed memory of [`Region::chunk_words`] words for this
    /// region, as long-lived as the region; `huge_from` is where huge pages may start.
    /// `chunk_nodes` is null, or zeroed memory for [`Region::chunk_count`] records, as
    /// long-lived (then new bags go to the fullest chunk with room).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn init(
        this: *mut Region,
        start: usize,
        end: usize,
        commit_on_demand: bool,
        budget: *const CommitBudget,
        huge_from: usize,
        small_chunks: *mut u64,
        chunk_nodes: *mut ChunkNode,
    ) {
        // SAFETY: exclusive access to zeroed memory (contract above); all-zero is a valid Region
        // (unlocked lock, empty buckets, null lists, zero counters).
        unsafe {
            (*this).start = start;
            (*this).end = end;
            (*this).commit_on_demand = commit_on_demand;
            (*this).budget = budget;
            (*this).huge_from = huge_from;
            (*this).small_chunks = small_chunks;
            (*this).chunk_nodes = chunk_nodes;
            (*this).frontier_hint = AtomicUsize::new(start);
            (*(*this).state.get()).frontier = start;
        }
    }

    /// Words of the chunk bitmap a region of `bytes` needs.
    pub fn chunk_words(bytes: usize) -> usize {
        Self::chunk_count(bytes).div_ceil(64)
    }

    /// Chunks in a region of `bytes`.
    pub fn chunk_count(bytes: usize) -> usize {
        bytes / CHUNK_BYTES
    }

    /// The frontier word itself, for fast paths that cache a pointer to it.
    pub fn frontier_word(&self) -> &AtomicUsize {
        &self.frontier_hint
    }

    /// True when `address` lies below the frontier, where tags and descriptors are readable.
    #[inline]
    pub fn is_below_frontier(&self, address: usize) -> bool {
        address >= self.start && address < self.frontier_hint.load(Ordering::Acquire)
    }

    /// Counts `bytes` as committed, within the arena's limit. False when the limit forbids it.
    fn charge(&self, bytes: usize) -> bool {
        // SAFETY: `budget` points into the arena header, which outlives every region.
        if !unsafe { &*self.budget }.try_charge(bytes) {
            return false;
        }
        self.committed.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    fn uncharge(&self, bytes: usize) {
        // SAFETY: as in `charge`.
        unsafe { &*self.budget }.uncharge(bytes);
        self.committed.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Moves the frontier to `new` (under the span lock), committing the stretch first when the
    /// arena commits on demand. False, changing nothing, if the kernel refuses.
    fn move_frontier(&self, state: &mut PoolState, map: &PageMap, new: usize) -> bool {
        let old = state.frontier;
        if self.commit_on_demand
            && !(os::commit(old as *mut u8, new - old)
                && map.commit_units(map.unit_of(old), map.unit_of(new)))
        {
            return false;
        }
        if !self.chunk_nodes.is_null() {
            // Chunks the frontier passes join the filler's lists, empty.
            let mut chunk = old.next_multiple_of(CHUNK_BYTES);
            while chunk < new {
                self.link_chunk(state, (chunk - self.start) / CHUNK_BYTES);
                chunk += CHUNK_BYTES;
            }
        }
        state.frontier = new;
        self.mapped.store(new - self.start, Ordering::Relaxed);
        // Release: the committed metadata is visible to whoever sees the new frontier.
        self.frontier_hint.store(new, Ordering::Release);
        true
    }

    pub fn start(&self) -> usize {
        self.start
    }

    #[cfg(test)]
    pub fn end(&self) -> usize {
        self.end
    }

    /// Hands out `units` units aligned to `align_units`, tagged for `usage`. `None` when the
    /// region can neither reuse a free span nor advance its frontier.
    pub fn alloc(
        &self,
        map: &PageMap,
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<usize> {
        let _guard = self.lock.lock();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        let (address, zeroed) = self
            .take_fullest(state, map, units, align_units)
            .or_else(|| self.take_free(state, map, units, align_units))
            .or_else(|| {
                self.advance_frontier(state, map, units, align_units)
                    .map(|address| (address, true))
            })
            .or_else(|| {
                // The region is exhausted, or the commit limit refused. Dirty and clean free
                // spans never merge, so free memory can be cut into pieces too small for the
                // request: decommit every dirty span (it then coalesces with its clean
                // neighbours, and no longer counts against the limit) and look once more, then
                // past the frontier, which the limit may have refused before the purge.
                self.purge_locked(
                    state,
                    map,
                    os::monotonic_ns().max(1),
                    DecommitPolicy {
                        delay_ns: 0,
                        retain_bytes: 0,
                    },
                    true,
                );
                self.take_free(state, map, units, align_units).or_else(|| {
                    self.advance_frontier(state, map, units, align_units)
                        .map(|address| (address, true))
                })
            })?;
        self.tag_in_use(map, address, units, usage);
        self.count_used(state, address, units, true);
        if zeroed {
            let meta = map.meta(map.unit_of(address));
            // SAFETY: the span lock is held and the span is ours (just tagged).
            unsafe {
                match usage {
                    SpanUse::Large => (*meta).live = ZEROED,
                    SpanUse::Bag(_) => (*meta).freed_at = BAG_ZEROED,
                }
            }
        }
        self.active
            .fetch_add(units << UNIT_SHIFT, Ordering::Relaxed);
        Some(address)
    }

    /// Returns a span to the pool (dirty), coalescing with dirty neighbours, then decommits what
    /// the decommit policy says is due.
    pub fn free(&self, map: &PageMap, address: usize, units: usize, decommit: DecommitPolicy) {
        let now = os::monotonic_ns().max(1);
        let _guard = self.lock.lock();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        self.active
            .fetch_sub(units << UNIT_SHIFT, Ordering::Relaxed);
        let first = map.unit_of(address);
        for unit in first..first + units {
            map.set_tag(unit, Tag::UNUSED);
        }
        self.count_used(state, address, units, false);
        if now.saturating_sub(state.recent_free_at) >= decommit.delay_ns {
            state.recent_free = 0;
        }
        state.recent_free = state.recent_free.max(units << UNIT_SHIFT);
        state.recent_free_at = now;
        self.insert_coalesced(state, map, first, units, now);
        self.purge_locked(state, map, now, decommit, false);
    }

    /// Grows a large span in place to `new_units` if the units after it are free (or are the
    /// frontier). Returns false, changing nothing, otherwise.
    pub fn grow(&self, map: &PageMap, address: usize, old_units: usize, new_units: usize) -> bool {
        let _guard = self.lock.lock();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        let extra = new_units - old_units;
        let next = address + (old_units << UNIT_SHIFT);
        let Some(needed_end) = next.checked_add(extra << UNIT_SHIFT) else {
            return false;
        };
        // The free span right after us, if any, and where the free room after us ends.
        let mut neighbour = null_mut();
        let mut room_end = next;
        if next < state.frontier && map.tag(next).kind() == Kind::Free {
            neighbour = map.meta(map.unit_of(next));
            // SAFETY: the span lock is held and `neighbour` heads a free span of this region.
            room_end = next + (unsafe { (*neighbour).units } << UNIT_SHIFT);
        }
        let extend_to = if needed_end <= room_end {
            None
        } else if room_end == state.frontier {
            let frontier =
                round_up(needed_end - self.start, CHUNK_UNITS << UNIT_SHIFT) + self.start;
            if frontier > self.end {
                return false;
            }
            Some(frontier)
        } else {
            return false;
        };
        // Charge the commit budget first: clean units taken from the neighbour and units past
        // the frontier become committed; dirty ones already are.
        let mut new_bytes = needed_end.saturating_sub(room_end);
        if !neighbour.is_null() {
            // SAFETY: as above.
            let (available, freed_at) = unsafe { ((*neighbour).units, (*neighbour).freed_at) };
            if freed_at == 0 {
                new_bytes += available.min(extra) << UNIT_SHIFT;
            }
        }
        if !self.charge(new_bytes) {
            return false;
        }
        if let Some(frontier) = extend_to {
            if !self.move_frontier(state, map, frontier) {
                self.uncharge(new_bytes);
                return false;
            }
        }
        if !neighbour.is_null() {
            // SAFETY: as above.
            let (available, freed_at) = unsafe { ((*neighbour).units, (*neighbour).freed_at) };
            self.remove_free(state, neighbour);
            let used = available.min(extra);
            if available > used {
                self.insert_free(
                    state,
                    map,
                    map.unit_of(next) + used,
                    available - used,
                    freed_at,
                );
            }
        }
        if let Some(frontier) = extend_to {
            if frontier > needed_end {
                let spare = (frontier - needed_end) >> UNIT_SHIFT;
                self.insert_free(state, map, map.unit_of(needed_end), spare, 0);
            }
        }
        let first = map.unit_of(address);
        for unit in first + old_units..first + new_units {
            map.set_tag(unit, Tag::LARGE_BODY);
        }
        // SAFETY: the span lock is held; `address` heads a large span we own.
        unsafe { (*map.meta(first)).units = new_units };
        self.count_used(state, next, extra, true);
        self.active
            .fetch_add(extra << UNIT_SHIFT, Ordering::Relaxed);
        true
    }

    /// Shrinks a large span in place, returning its tail to the pool.
    pub fn shrink(
        &self,
        map: &PageMap,
        address: usize,
        old_units: usize,
        new_units: usize,
        decommit: DecommitPolicy,
    ) {
        debug_assert!(new_units >= 1 && new_units < old_units);
        {
            let _guard = self.lock.lock();
            // SAFETY: the span lock is held; `address` heads a large span we own.
            unsafe { (*map.meta(map.unit_of(address))).units = new_units };
        }
        self.free(
            map,
            address + (new_units << UNIT_SHIFT),
            old_units - new_units,
            decommit,
        );
    }

    /// Decommits dirty spans that the policy says are due (all of them when `force`).
    pub fn purge(&self, map: &PageMap, decommit: DecommitPolicy, force: bool) {
        let now = os::monotonic_ns().max(1);
        let _guard = self.lock.lock();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        self.purge_locked(state, map, now, decommit, force);
    }

    /// Gives the pages of `[address, address + bytes)`, inside a span still in use (a bag), back
    /// to the OS. A chunk of the huge-page part is first taken off huge pages, as for a partial
    /// decommit (see `settle_huge_pages`); it goes back on them when the whole chunk is clean.
    ///
    /// # Safety
    /// The range must be page aligned, inside a span of this region handed out and not freed,
    /// and hold no live object.
    pub unsafe fn release_in_use(&self, address: usize, bytes: usize) {
        if address + bytes > self.huge_from {
            let _guard = self.lock.lock();
            let mut chunk = (address & !(CHUNK_BYTES - 1)).max(self.huge_from);
            while chunk < address + bytes {
                self.keep_off_huge_pages(chunk);
                chunk += CHUNK_BYTES;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { os::decommit(address as *mut u8, bytes) };
    }

    #[cfg(test)]
    /// Bytes of free spans still committed.
    pub fn dirty_bytes(&self) -> usize {
        let _guard = self.lock.lock();
        // SAFETY: the span lock is held.
        unsafe { (*self.state.get()).dirty_bytes }
    }

    pub fn lock_for_fork(&self) {
        self.lock.acquire();
    }

    pub fn unlock_after_fork(&self) {
        self.lock.release();
    }

    fn purge_locked(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        now: u64,
        decommit: DecommitPolicy,
        force: bool,
    ) {
        // Dirty memory up to a share of what is in use (plus twice the largest recent free) waits
        // out the delay: a heap that churns reuses it without faults. Past that, or once the heap
        // has mostly emptied, the oldest goes at once.
        let young_cap = self.active.load(Ordering::Relaxed) / DIRTY_SHARE + 2 * state.recent_free;
        while !state.oldest.is_null() {
            let oldest = state.oldest;
            // SAFETY: the span lock is held; the age list holds heads of dirty free spans.
            let (units, freed_at) = unsafe { ((*oldest).units, (*oldest).freed_at) };
            if !force
                && (state.dirty_bytes <= decommit.retain_bytes
                    || (now.saturating_sub(freed_at) < decommit.delay_ns
                        && state.dirty_bytes <= young_cap))
            {
                break;
            }
            self.remove_free(state, oldest);
            let first = map.unit_of_meta(oldest);
            // Its head and tail tags go: merged with a clean neighbour, they would be left
            // inside the merged span, where the filler's scan would take them for a head.
            map.set_tag(first, Tag::UNUSED);
            map.set_tag(first + units - 1, Tag::UNUSED);
            let address = map.address_of(first);
            let bytes = units << UNIT_SHIFT;
            // SAFETY: the span is free (no live object) and inside our region.
            unsafe { os::decommit(address as *mut u8, bytes) };
            self.uncharge(bytes);
            self.decommitted.fetch_add(bytes, Ordering::Relaxed);
            let (merged, merged_units) = self.insert_coalesced(state, map, first, units, 0);
            let merged = map.address_of(merged);
            self.settle_huge_pages(address, bytes, merged, merged_units << UNIT_SHIFT);
        }
    }

    /// After `[address, address + bytes)` was decommitted and merged into the clean span
    /// `[merged, merged + merged_bytes)`: each chunk it touched that is still partly in use is
    /// advised `MADV_NOHUGEPAGE`, and each that is now wholly clean and was so advised goes back
    /// to `MADV_HUGEPAGE` (one call per run; its next use may fault in a huge page again).
    ///
    /// Without this, khugepaged, which collapses any huge-page-eligible 2 MiB range with a single
    /// resident page (its default `max_ptes_none` is 511), would fill decommitted pages back in
    /// with zeros, and RSS would creep up for as long as the program runs. Only chunks the
    /// decommit touched can change state, so the work is proportional to the decommit.
    fn settle_huge_pages(&self, address: usize, bytes: usize, merged: usize, merged_bytes: usize) {
        let first = (address & !(CHUNK_BYTES - 1)).max(self.huge_from);
        let end = (address + bytes).next_multiple_of(CHUNK_BYTES);
        let mut run_start = 0;
        let mut chunk = first;
        while chunk < end {
            let wholly_clean = chunk >= merged && chunk + CHUNK_BYTES <= merged + merged_bytes;
            if wholly_clean {
                let index = (chunk - self.start) / CHUNK_BYTES;
                // SAFETY: the span lock is held and the bitmap covers every chunk of the region.
                let word = unsafe { &mut *self.small_chunks.add(index / 64) };
                let bit = 1u64 << (index % 64);
                if *word & bit != 0 {
                    *word &= !bit;
                    if run_start == 0 {
                        run_start = chunk;
                    }
                }
            } else {
                self.advise_run(&mut run_start, chunk);
                self.keep_off_huge_pages(chunk);
            }
            chunk += CHUNK_BYTES;
        }
        self.advise_run(&mut run_start, end.max(first));
    }

    /// Advises `chunk` (in the huge-page part) `MADV_NOHUGEPAGE` unless its bit says it already
    /// is, and sets the bit. The span lock must be held. A refusal (the map count limit) only
    /// leaves the chunk as it was: a later collapse costs memory, not correctness.
    fn keep_off_huge_pages(&self, chunk: usize) {
        let index = (chunk - self.start) / CHUNK_BYTES;
        // SAFETY: the caller holds the span lock and the bitmap covers every chunk of the region.
        let word = unsafe { &mut *self.small_chunks.add(index / 64) };
        let bit = 1u64 << (index % 64);
        if *word & bit == 0 && os::advise(chunk as *mut u8, CHUNK_BYTES, libc::MADV_NOHUGEPAGE) {
            *word |= bit;
        }
    }

    /// Advises the chunks from `*run_start` (0: none) up to `end` back onto huge pages.
    fn advise_run(&self, run_start: &mut usize, end: usize) {
        if *run_start != 0 {
            os::advise(*run_start as *mut u8, end - *run_start, libc::MADV_HUGEPAGE);
            *run_start = 0;
        }
    }

    /// The filler's choice (dense pools, unaligned requests up to half a chunk): a free span
    /// headed in the fullest chunk that has one of at least `units`, carved from its start.
    /// `None` when the pool has no filler or it found nothing (the best-fit search follows).
    fn take_fullest(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
        align_units: usize,
    ) -> Option<(usize, bool)> {
        if self.chunk_nodes.is_null() || align_units != 1 || units > CHUNK_UNITS / 2 {
            return None;
        }
        // Full chunks (level CHUNK_UNITS) have no room; the rest from the fullest down.
        let mut levels = state.fullness_nonempty & ((1u128 << CHUNK_UNITS) - 1);
        while levels != 0 {
            let level = 127 - levels.leading_zeros() as usize;
            levels &= !(1u128 << level);
            let mut link = state.fullness[level];
            let mut tries = 0;
            while link != 0 && tries < FILLER_TRIES {
                let chunk = link as usize - 1;
                if let Some((meta, head, span_units)) =
                    self.free_span_in_chunk(state, map, chunk, units)
                {
                    // SAFETY: the span lock is held; `meta` heads a free span of this pool.
                    let clean = unsafe { (*meta).freed_at } == 0;
                    if clean && !self.charge(units << UNIT_SHIFT) {
                        return None;
                    }
                    let address = self.carve(state, map, meta, head, span_units, 0, units);
                    return Some((address, clean));
                }
                // SAFETY: `chunk` is below the frontier, so its record is in our array.
                link = unsafe { (*self.chunk_nodes.add(chunk)).next };
                tries += 1;
            }
        }
        None
    }

    /// The first free span headed in `chunk` with at least `units` units: its descriptor, first
    /// unit and length.
    fn free_span_in_chunk(
        &self,
        state: &PoolState,
        map: &PageMap,
        chunk: usize,
        units: usize,
    ) -> Option<(*mut UnitMeta, usize, usize)> {
        let first = map.unit_of(self.start + chunk * CHUNK_BYTES);
        let mut unit = first;
        while unit < first + CHUNK_UNITS {
            let tag = map.tag(map.address_of(unit));
            let meta = map.meta(unit);
            // SAFETY: the span lock is held; a Free tag heads a free span whose descriptor
            // records its length, and a bag or large span's first unit records its length.
            let length = match tag.kind() {
                Kind::Free | Kind::Bag | Kind::Large => unsafe { (*meta).units },
                _ => 1,
            };
            // A head that is really listed (a tag left inside a merged span would not be).
            // SAFETY: as above.
            let listed =
                || unsafe { !(*meta).prev.is_null() } || state.buckets[bucket_of(length)] == meta;
            if tag.kind() == Kind::Free && length >= units && listed() {
                return Some((meta, unit, length));
            }
            unit += length.max(1);
        }
        None
    }

    /// Adds (or removes) `units` in-use units starting at `address` to the filler's counts of
    /// the chunks they lie in, moving each chunk to the list of its new count.
    fn count_used(&self, state: &mut PoolState, address: usize, units: usize, add: bool) {
        if self.chunk_nodes.is_null() {
            return;
        }
        let end = address + (units << UNIT_SHIFT);
        let mut from = address;
        while from < end {
            let chunk = (from - self.start) / CHUNK_BYTES;
            let chunk_end = self.start + (chunk + 1) * CHUNK_BYTES;
            let here = ((end.min(chunk_end) - from) >> UNIT_SHIFT) as u32;
            self.unlink_chunk(state, chunk);
            // SAFETY: the span lock is held and the chunk is below the frontier.
            let node = unsafe { &mut *self.chunk_nodes.add(chunk) };
            if add {
                node.used += here;
            } else {
                node.used -= here;
            }
            debug_assert!(node.used as usize <= CHUNK_UNITS);
            self.link_chunk(state, chunk);
            from = chunk_end.min(end);
        }
    }

    /// Puts `chunk` at the head of the list of its count (span lock held).
    fn link_chunk(&self, state: &mut PoolState, chunk: usize) {
        // SAFETY: the span lock is held and `chunk` is a chunk of this pool.
        let node = unsafe { &mut *self.chunk_nodes.add(chunk) };
        let level = node.used as usize;
        node.prev = 0;
        node.next = state.fullness[level];
        if node.next != 0 {
            // SAFETY: as above; list links name chunks of this pool.
            unsafe { (*self.chunk_nodes.add(node.next as usize - 1)).prev = chunk as u32 + 1 };
        }
        state.fullness[level] = chunk as u32 + 1;
        state.fullness_nonempty |= 1 << level;
    }

    /// Takes `chunk` off the list of its count (span lock held).
    fn unlink_chunk(&self, state: &mut PoolState, chunk: usize) {
        // SAFETY: the span lock is held and `chunk` is a listed chunk of this pool.
        let node = unsafe { *self.chunk_nodes.add(chunk) };
        let level = node.used as usize;
        if node.prev == 0 {
            state.fullness[level] = node.next;
            if node.next == 0 {
                state.fullness_nonempty &= !(1 << level);
            }
        } else {
            // SAFETY: as above.
            unsafe { (*self.chunk_nodes.add(node.prev as usize - 1)).next = node.next };
        }
        if node.next != 0 {
            // SAFETY: as above.
            unsafe { (*self.chunk_nodes.add(node.next as usize - 1)).prev = node.prev };
        }
    }

    /// Finds a free span of at least `units` (aligned) and carves the request from it.
    fn take_free(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
        align_units: usize,
    ) -> Option<(usize, bool)> {
        let needed = units + align_units - 1;
        let mut bucket = bucket_of(units);
        // A clean fit is used only when no dirty span fits in this bucket or the next few
        // non-empty ones: reusing committed memory costs no page faults, and dirty memory that
        // is reused never has to be decommitted.
        let mut clean_fit: Option<(*mut UnitMeta, usize, usize)> = None;
        let mut buckets_after_clean = 0;
        // In an exact bucket every span fits an unaligned request; a log bucket is scanned a little.
        loop {
            let mask = state.nonempty >> bucket;
            if mask == 0 || (clean_fit.is_some() && buckets_after_clean == DIRTY_SEARCH_BUCKETS) {
                break;
            }
            bucket += mask.trailing_zeros() as usize;
            let mut candidate = state.buckets[bucket];
            let mut scanned = 0;
            while !candidate.is_null() && scanned < 16 {
                // SAFETY: the span lock is held; bucket lists hold heads of free spans.
                let span_units = unsafe { (*candidate).units };
                let head = map.unit_of_meta(candidate);
                if let Some(offset) = fit(map.address_of(head), span_units, units, align_units) {
                    // SAFETY: as above.
                    if unsafe { (*candidate).freed_at } != 0 {
                        let address =
                            self.carve(state, map, candidate, head, span_units, offset, units);
                        return Some((address, false));
                    }
                    if clean_fit.is_none() {
                        clean_fit = Some((candidate, span_units, offset));
                    }
                }
                // SAFETY: as above.
                candidate = unsafe { (*candidate).next };
                scanned += 1;
            }
            if clean_fit.is_some() {
                buckets_after_clean += 1;
            }
            if bucket + 1 >= NUM_BUCKETS || needed == 0 {
                break;
            }
            bucket += 1;
        }
        let (candidate, span_units, offset) = clean_fit?;
        if !self.charge(units << UNIT_SHIFT) {
            return None;
        }
        let head = map.unit_of_meta(candidate);
        let address = self.carve(state, map, candidate, head, span_units, offset, units);
        Some((address, true))
    }

    /// Cuts `[offset, offset + units)` out of the free span at `head`, returning the address.
    #[allow(clippy::too_many_arguments)]
    fn carve(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        meta: *mut UnitMeta,
        head: usize,
        span_units: usize,
        offset: usize,
        units: usize,
    ) -> usize {
        // SAFETY: the span lock is held; `meta` heads a free span.
        let freed_at = unsafe { (*meta).freed_at };
        self.remove_free(state, meta);
        if offset > 0 {
            self.insert_free(state, map, head, offset, freed_at);
        }
        let after = span_units - offset - units;
        if after > 0 {
            self.insert_free(state, map, head + offset + units, after, freed_at);
        }
        map.address_of(head + offset)
    }

    fn advance_frontier(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
        align_units: usize,
    ) -> Option<usize> {
        // A clean free span touching the frontier is extended rather than stranded.
        let mut start = state.frontier;
        if start > self.start {
            let last = start - UNIT;
            let tag = map.tag(last);
            if matches!(tag.kind(), Kind::Free | Kind::FreeTail) {
                // SAFETY: the span lock is held; free heads and tails record the span length.
                let length = unsafe { (*map.meta(map.unit_of(last))).units };
                let head = map.unit_of(last) + 1 - length;
                let meta = map.meta(head);
                // SAFETY: as above.
                if unsafe { (*meta).freed_at } == 0 {
                    self.remove_free(state, meta);
                    start = map.address_of(head);
                }
            }
        }
        // On failure, the clean span taken off the frontier goes back.
        let give_back = |region: &Self, state: &mut PoolState| {
            if start != state.frontier {
                let length = (state.frontier - start) >> UNIT_SHIFT;
                region.insert_free(state, map, map.unit_of(start), length, 0);
            }
        };
        // Aligned in absolute terms: the pool's start is only chunk-aligned.
        let align = align_units << UNIT_SHIFT;
        let Some((aligned, needed_end)) = start
            .checked_next_multiple_of(align)
            .and_then(|aligned| Some((aligned, aligned.checked_add(units << UNIT_SHIFT)?)))
            .filter(|&(_, needed_end)| needed_end <= self.end)
        else {
            give_back(self, state);
            return None;
        };
        let new_frontier = (round_up(needed_end - self.start, CHUNK_UNITS << UNIT_SHIFT)
            + self.start)
            .max(state.frontier);
        if new_frontier > self.end {
            give_back(self, state);
            return None;
        }
        let charged = self.charge(units << UNIT_SHIFT);
        if !charged
            || (new_frontier > state.frontier && !self.move_frontier(state, map, new_frontier))
        {
            if charged {
                self.uncharge(units << UNIT_SHIFT);
            }
            give_back(self, state);
            return None;
        }
        if aligned > start {
            self.insert_free(
                state,
                map,
                map.unit_of(start),
                (aligned - start) >> UNIT_SHIFT,
                0,
            );
        }
        if new_frontier > needed_end {
            self.insert_free(
                state,
                map,
                map.unit_of(needed_end),
                (new_frontier - needed_end) >> UNIT_SHIFT,
                0,
            );
        }
        Some(aligned)
    }

    fn tag_in_use(&self, map: &PageMap, address: usize, units: usize, usage: SpanUse) {
        let first = map.unit_of(address);
        for offset in 0..units {
            let tag = match usage {
                SpanUse::Bag(class) => Tag::bag(class, offset),
                SpanUse::Large if offset == 0 => Tag::LARGE,
                SpanUse::Large => Tag::LARGE_BODY,
            };
            map.set_tag(first + offset, tag);
        }
        let meta = map.meta(first);
        // SAFETY: the span lock is held and the span is now ours; reset every field.
        unsafe {
            *meta = UnitMeta {
                units,
                next: null_mut(),
                prev: null_mut(),
                free: null_mut(),
                carved: 0,
                live: 0,
                aside: Aside::NONE,
                freed_at: 0,
            };
        }
    }

    /// Inserts a free span, first merging it with free neighbours in the same state (dirty with
    /// dirty, clean with clean). `freed_at` 0 means clean.
    /// Returns the merged span's first unit and length.
    fn insert_coalesced(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        mut first: usize,
        mut units: usize,
        freed_at: u64,
    ) -> (usize, usize) {
        let dirty = freed_at != 0;
        let address = map.address_of(first);
        if address > self.start {
            let left = address - UNIT;
            if matches!(map.tag(left).kind(), Kind::Free | Kind::FreeTail) {
                // SAFETY: the span lock is held; free heads and tails record the span length.
                let length = unsafe { (*map.meta(map.unit_of(left))).units };
                let head = map.unit_of(left) + 1 - length;
                let meta = map.meta(head);
                // SAFETY: as above.
                if (unsafe { (*meta).freed_at } != 0) == dirty {
                    self.remove_free(state, meta);
                    map.set_tag(map.unit_of(left), Tag::UNUSED);
                    first = head;
                    units += length;
                }
            }
        }
        let right = map.address_of(first + units);
        if right < state.frontier && map.tag(right).kind() == Kind::Free {
            let meta = map.meta(map.unit_of(right));
            // SAFETY: the span lock is held; `meta` heads a free span.
            let (length, right_dirty) = unsafe { ((*meta).units, (*meta).freed_at != 0) };
            if right_dirty == dirty {
                self.remove_free(state, meta);
                map.set_tag(map.unit_of(right), Tag::UNUSED);
                units += length;
            }
        }
        // A merged dirty span keeps the newest time: it is only as old as its youngest part.
        self.insert_free(state, map, first, units, freed_at);
        (first, units)
    }

    /// Puts a span into its bucket (and the age list and `dirty_bytes` if dirty), writing its
    /// boundary tags.
    fn insert_free(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        first: usize,
        units: usize,
        freed_at: u64,
    ) {
        let meta = map.meta(first);
        let bucket = bucket_of(units);
        // SAFETY: the span lock is held; the span is free and these descriptors are ours.
        unsafe {
            *meta = UnitMeta {
                units,
                next: state.buckets[bucket],
                prev: null_mut(),
                free: null_mut(),
                carved: 0,
                live: 0,
                aside: Aside::NONE,
                freed_at,
            };
            if !state.buckets[bucket].is_null() {
                (*state.buckets[bucket]).prev = meta;
            }
            if freed_at != 0 {
                state.dirty_bytes += units << UNIT_SHIFT;
                (*meta).aside.age.older = state.newest;
                if state.newest.is_null() {
                    state.oldest = meta;
                } else {
                    (*state.newest).aside.age.newer = meta;
                }
                state.newest = meta;
            }
            if units > 1 {
                (*map.meta(first + units - 1)).units = units;
            }
        }
        state.buckets[bucket] = meta;
        state.nonempty |= 1 << bucket;
        map.set_tag(first, Tag::FREE);
        if units > 1 {
            map.set_tag(first + units - 1, Tag::FREE_TAIL);
        }
    }

    /// Unlinks a free span from its bucket and, if dirty, from the age list and `dirty_bytes`.
    /// Leaves its tags.
    fn remove_free(&self, state: &mut PoolState, meta: *mut UnitMeta) {
        // SAFETY: the span lock is held; `meta` heads a free span linked into our lists.
        unsafe {
            let bucket = bucket_of((*meta).units);
            if (*meta).prev.is_null() {
                state.buckets[bucket] = (*meta).next;
                if (*meta).next.is_null() {
                    state.nonempty &= !(1 << bucket);
                }
            } else {
                (*(*meta).prev).next = (*meta).next;
            }
            if !(*meta).next.is_null() {
                (*(*meta).next).prev = (*meta).prev;
            }
            if (*meta).freed_at != 0 {
                state.dirty_bytes -= (*meta).units << UNIT_SHIFT;
                let AgeLinks { older, newer } = (*meta).aside.age;
                if older.is_null() {
                    state.oldest = newer;
                } else {
                    (*older).aside.age.newer = newer;
                }
                if newer.is_null() {
                    state.newest = older;
                } else {
                    (*newer).aside.age.older = older;
                }
            }
            (*meta).next = null_mut();
            (*meta).prev = null_mut();
            (*meta).aside = Aside::NONE;
        }
    }
}

/// Where in a free span `[start, start + span_units)` an aligned request of `units` fits:
/// the offset in units, preferring the span's start.
fn fit(start: usize, span_units: usize, units: usize, align_units: usize) -> Option<usize> {
    if span_units < units {
        return None;
    }
    let align = align_units << UNIT_SHIFT;
    let aligned = round_up(start, align);
    let offset = (aligned - start) >> UNIT_SHIFT;
    if offset + units <= span_units {
        Some(offset)
    } else {
        None
    }
}
