//! A node region's span pool: the memory of one node, handed out in whole units.
//!
//! The region grows a **frontier** through its reserved range in 2 MiB chunks (each can be one
//! transparent huge page, and all threads of the node carve their bags from the same chunks:
//! NUMAlloc's incremental sharing of huge pages). The reservation past the frontier is
//! `PROT_NONE`, opened as the frontier passes it: a wild access past the heap faults instead of
//! landing in writable memory. In the pool's first 8 MiB (never on huge pages) the frontier
//! moves by 64 KiB steps, so a young heap's fence stays close behind its blocks. Freed spans go into size **buckets** and
//! coalesce with free neighbours of the same state, found through the page map's boundary tags.
//!
//! Free spans are either **dirty** (still committed: reusing them costs no page fault) or
//! **clean** (decommitted with `MADV_DONTNEED`). Dirty spans sit on an age list; the oldest are
//! decommitted once they have been free for the decommit delay *and* the node holds more dirty
//! bytes than its retained budget. This is the large-object cache and the bag pool at once.
//!
//! Everything mutable sits behind the region's span lock. The few counters read by `stats()`
//! are atomics written under the lock.

mod budget;
mod decommit;
mod filler;
mod hold;
mod huge;
mod prepare;
mod resize;
mod spans;

pub use budget::CommitBudget;
pub use decommit::DecommitPolicy;
use decommit::Purge;
pub(crate) use decommit::Stretch;
pub use hold::{holds_units, GUARD_BURST};
#[cfg(test)]
pub use hold::{GUARD_REFILL_NS, HOLD_MAX_UNITS, HOLD_MIN_UNITS};
pub use prepare::PREPARE_WINDOW_NS;
use spans::bucket_of;
pub(crate) use spans::{canary_of, check_canary};

use super::pagemap::{AgeLinks, Kind, PageMap, Role, Tag, UnitMeta};
use super::round_up;
use crate::ds::spinlock::{SpinGuard, SpinLock};
use crate::os;
use crate::size_class::{SizeClass, MAX_BAG_UNITS, UNIT, UNIT_SHIFT};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Non-empty buckets searched for a dirty span after the one where a clean span fits.
const DIRTY_SEARCH_BUCKETS: usize = 3;

/// The bucket sets of [`PoolState::buckets`]: free spans still committed, and decommitted.
const DIRTY: usize = 0;
const CLEAN: usize = 1;

/// The bucket set of a free span freed at `freed_at` (0: clean).
fn set_of(freed_at: u64) -> usize {
    if freed_at != 0 {
        DIRTY
    } else {
        CLEAN
    }
}

/// The smallest request (256 KiB, past the size classes) served over a dirty span and its clean
/// neighbours together ([`Region::take_mixed`]), and the dirty spans looked at for it.
const MIX_MIN_UNITS: usize = 8;
const MIX_CANDIDATES: usize = 16;

/// Units per 2 MiB chunk, the step by which the frontier advances.
pub const CHUNK_UNITS: usize = 64;
const CHUNK_BYTES: usize = CHUNK_UNITS * UNIT;
/// Exact-size buckets for spans up to a chunk, then one bucket per power of two.
const EXACT_BUCKETS: usize = MAX_BAG_UNITS;
const NUM_BUCKETS: usize = 128;

/// The frontier's step within a pool's first [`FINE_FRONTIER`] bytes (see
/// [`Region::frontier_for`]). Those bytes are never advised onto huge pages (the arena's small
/// page head), so opening them piecemeal costs no huge page. Each step is an `mprotect`: 256 KiB
/// keeps a wild access a megabyte past a young heap's blocks faulting, at one `mprotect` for
/// several classes' first bags (64 KiB cost a small process one for nearly every class).
pub const FENCE_STEP: usize = 8 * UNIT;
pub const FINE_FRONTIER: usize = 4 * CHUNK_BYTES;

/// Chunks of one fullness level the filler looks into before trying the next level down.
const FILLER_TRIES: usize = 4;

/// The filler's record of one chunk of a dense pool: units in use, the chunk's links in the
/// list of chunks with that many units in use (chunk index + 1; 0 ends the list), and where the
/// filler's scan for a free span starts (see [`Region::free_span_in_chunk`]).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ChunkNode {
    used: u32,
    prev: u32,
    next: u32,
    /// A unit of the chunk (relative to its start; `CHUNK_UNITS` for none) before which no
    /// listed free span starts, at a span boundary: lowered when a free span is listed before
    /// it, raised past a span handed out over it, and set by the scan to the first free span
    /// it met. Without it, every bag the filler placed scanned its chunk from the start, over
    /// up to 63 bags (6.5 % of a heap growing into 2 100-byte objects).
    scan_from: u32,
}

/// What a span is handed out for; decides the tags written over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanUse {
    Bag(SizeClass),
    Large,
}

struct PoolState {
    frontier: usize,
    /// Free spans by size, dirty ([`DIRTY`]) and clean ([`CLEAN`]) apart, so a search for
    /// committed memory never wades through the spans a purge just decommitted; a bit per
    /// non-empty bucket.
    buckets: [[*mut UnitMeta; NUM_BUCKETS]; 2],
    nonempty: [u128; 2],
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
    /// Preparation (`prepare.rs`): the chunk the maintenance thread is populating (0: none),
    /// where the chunks it prepared since demand last paused start (0: none), bytes handed
    /// out that would fault or came from prepared chunks (the demand it follows), the part of
    /// that it has seen, until when it prepares, and the dirty bytes it keeps ready meanwhile.
    preparing: usize,
    prepared_from: usize,
    fresh_taken: usize,
    fresh_seen: usize,
    wanted_until: u64,
    reserve: usize,
    /// The recent peak of the bytes in use, which the decommit rule lets free memory wait
    /// under (`decommit.rs`).
    peak: decommit::PeakWindow,
    /// The span freed last, kept out of the lists (`hold.rs`).
    hold: hold::Hold,
    /// How far the decommit delay is stretched to follow demand (`decommit.rs`).
    stretch: decommit::Stretch,
    /// How far pauses stretch it: quiet purges whose memory the program took back after its
    /// pause (`decommit.rs`, [`Purge::Quiet`]).
    quiet_stretch: decommit::Stretch,
    /// How far a busy pool raises its cap on young dirty memory (`decommit.rs`).
    boost: decommit::CapBoost,
    /// Spans handed out so far, and as of the maintenance thread's last pass: a pool whose
    /// count did not move between two passes is quiet ([`Region::purge_quiet`]).
    handouts: u64,
    handouts_seen: u64,
    /// When the last span was handed out (0: never): memory freed after it waits through a
    /// pause in the program's demand from then on, not from its own free (`decommit.rs`).
    handout_at: u64,
}

pub struct Region {
    lock: SpinLock,
    state: UnsafeCell<PoolState>,
    start: usize,
    end: usize,
    /// The reservation is `PROT_NONE` and each stretch the frontier passes is committed first
    /// (`vm.overcommit_memory=2`, where a writable reservation would be charged in full).
    commit_on_demand: bool,
    /// Freed spans get canaries in their first and last words, checked when they are merged or
    /// reused (default mode; see [`Region::free`]).
    canaries: bool,
    /// The frontier, readable without the lock: descriptors past it may be inaccessible (tags
    /// are readable everywhere, zero where never written).
    frontier_hint: AtomicUsize,
    /// The arena's commit budget (lives in the arena header, as long as the region).
    budget: *const CommitBudget,
    /// The commit budget of the region's memory tier (near or far; in the arena header too).
    tier_budget: *const CommitBudget,
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
    /// Chunks the maintenance thread populated ahead of demand (see `prepare.rs`).
    pub prepared: AtomicUsize,
    /// Times the span lock was taken (statistics: the node's shared-structure operations).
    pub span_locks: AtomicU64,
    /// When the hold earns its next token while it has none (0: it has tokens), readable
    /// without the lock: see [`Region::hold_takes`].
    hold_open_at: AtomicU64,
}

// SAFETY: `state` is only touched with `lock` held; the rest is immutable after `init` or atomic.
unsafe impl Sync for Region {}

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
        canaries: bool,
        budget: *const CommitBudget,
        tier_budget: *const CommitBudget,
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
            (*this).canaries = canaries;
            (*this).budget = budget;
            (*this).tier_budget = tier_budget;
            (*this).huge_from = huge_from;
            (*this).small_chunks = small_chunks;
            (*this).chunk_nodes = chunk_nodes;
            (*this).frontier_hint = AtomicUsize::new(start);
            (*(*this).state.get()).frontier = start;
        }
    }

    /// Takes the span lock, counted in [`Region::span_locks`].
    #[inline]
    fn lock_span(&self) -> SpinGuard<'_> {
        let guard = self.lock.lock();
        self.span_locks.fetch_add(1, Ordering::Relaxed);
        guard
    }

    /// Words of the chunk bitmap a region of `bytes` needs.
    pub fn chunk_words(bytes: usize) -> usize {
        Self::chunk_count(bytes).div_ceil(64)
    }

    /// Chunks in a region of `bytes`.
    pub fn chunk_count(bytes: usize) -> usize {
        bytes / CHUNK_BYTES
    }

    /// The frontier as free paths read it.
    #[cfg(test)]
    pub fn frontier_word(&self) -> &AtomicUsize {
        &self.frontier_hint
    }

    #[cfg(test)]
    pub fn start(&self) -> usize {
        self.start
    }

    /// True when `address` lies below the frontier, where tags and descriptors are readable.
    #[inline]
    pub fn is_below_frontier(&self, address: usize) -> bool {
        address >= self.start && address < self.frontier_hint.load(Ordering::Acquire)
    }

    /// Counts `bytes` as committed, within the limit of the region's tier and the arena's. False
    /// when either forbids it (nothing charged then).
    fn charge(&self, bytes: usize) -> bool {
        // SAFETY: both budgets point into the arena header, which outlives every region.
        let (tier, arena) = unsafe { (&*self.tier_budget, &*self.budget) };
        if !tier.try_charge(bytes) {
            return false;
        }
        if !arena.try_charge(bytes) {
            tier.uncharge(bytes);
            return false;
        }
        self.committed.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    fn uncharge(&self, bytes: usize) {
        // SAFETY: as in `charge`.
        unsafe {
            (*self.budget).uncharge(bytes);
            (*self.tier_budget).uncharge(bytes);
        }
        self.committed.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Where the frontier moves to hand out spans up to `needed_end`: the next [`FENCE_STEP`]
    /// within the pool's first [`FINE_FRONTIER`] bytes (a small heap's wild accesses a little
    /// way past its blocks then fault, as past glibc's heap top), the next chunk past them (a
    /// chunk opened whole can be one huge page).
    fn frontier_for(&self, needed_end: usize) -> usize {
        let offset = needed_end - self.start;
        let step = if offset <= FINE_FRONTIER {
            FENCE_STEP
        } else {
            CHUNK_BYTES
        };
        self.start + round_up(offset, step)
    }

    /// Moves the frontier to `new` (under the span lock), opening the stretch first (and
    /// committing its descriptors when the arena commits on demand). False, changing nothing,
    /// if the kernel refuses.
    fn move_frontier(&self, state: &mut PoolState, map: &PageMap, new: usize) -> bool {
        let old = state.frontier;
        // The reservation past the frontier is `PROT_NONE` (the fence): the stretch is opened
        // here, and its descriptors committed when the page map commits on demand too.
        if !os::commit(old as *mut u8, new - old)
            || (self.commit_on_demand && !map.commit_units(map.unit_of(old), map.unit_of(new)))
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
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        let fills = Self::fills(usage);
        let (address, zeroed) = fills
            .then(|| self.take_fullest(state, map, units, align_units))
            .flatten()
            .or_else(|| self.take_free(state, map, units, align_units))
            .inspect(|&(_, zeroed)| {
                if zeroed {
                    // A clean span: memory decommitted before, handed out again.
                    Self::note_retaken(state, units << UNIT_SHIFT);
                }
            })
            .or_else(|| {
                self.advance_frontier(state, map, units, align_units)
                    .map(|address| (address, true))
            })
            .or_else(|| {
                // The region is exhausted, or the commit limit refused. Dirty and clean free
                // spans never merge, so free memory can be cut into pieces too small for the
                // request: decommit every dirty span (it then coalesces with its clean
                // neighbours, and no longer counts against the limit) and look once more, then
                // past the frontier, which the limit may have refused before the purge. The
                // held span joins them first.
                self.release_held(state, map);
                self.purge_locked(
                    state,
                    map,
                    os::monotonic_ns().max(1),
                    DecommitPolicy {
                        delay_ns: 0,
                        retain_bytes: 0,
                        spare_bytes: 0,
                    },
                    Purge::All,
                );
                self.take_free(state, map, units, align_units).or_else(|| {
                    self.advance_frontier(state, map, units, align_units)
                        .map(|address| (address, true))
                })
            })?;
        if zeroed || (state.prepared_from != 0 && address >= state.prepared_from) {
            state.fresh_taken += units << UNIT_SHIFT;
        }
        state.handouts += 1;
        state.handout_at = os::monotonic_ns().max(1);
        self.tag_in_use(map, address, units, usage);
        self.count_used(state, address, units, true, fills);
        let meta = map.meta(map.unit_of(address));
        // SAFETY: the span lock is held and the span is ours (just tagged): its head takes its
        // new role whole, so nothing of the free span's state is read in the new role's sense.
        unsafe {
            (*meta).role = match usage {
                SpanUse::Large => Role::new_large(zeroed),
                SpanUse::Bag(_) => Role::new_bag(zeroed),
            };
        }
        #[cfg(debug_assertions)]
        if let SpanUse::Bag(class) = usage {
            // Nothing of the new bag is free in it yet: a bag clears its bits when it leaves
            // use (`FreeBits`), and the bits start zeroed.
            let bits = map.free_bits(address);
            debug_assert!((0..class.capacity().div_ceil(64)).all(|word| bits.word(word) == 0));
        }
        self.add_active(state, units);
        Some(address)
    }

    /// Counts `units` more units handed out (a span, or a large span's growth in place), and
    /// raises the recent peak of use with them. The span lock must be held.
    fn add_active(&self, state: &mut PoolState, units: usize) {
        let bytes = units << UNIT_SHIFT;
        let active = self.active.fetch_add(bytes, Ordering::Relaxed) + bytes;
        state.peak.raise(active);
    }

    /// Returns a span to the pool (dirty), coalescing with dirty neighbours, then decommits what
    /// the decommit policy says is due, unless `defer` leaves that to the maintenance thread.
    ///
    /// With canaries, the span's first and last words take canaries first: a write into the
    /// freed span there (a linear overflow from the block before it, an underflow from the
    /// block after it, a write after free) is found when a neighbour's free merges the word
    /// into a bigger span, or when the memory is handed out again, and aborts naming the
    /// address (`spans::check_canary`). The last word may fault in a page the program never
    /// touched: one page per freed span, until the span is reused or decommitted.
    pub fn free(
        &self,
        map: &PageMap,
        address: usize,
        units: usize,
        decommit: DecommitPolicy,
        defer: bool,
    ) {
        let now = os::monotonic_ns().max(1);
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        self.active
            .fetch_sub(units << UNIT_SHIFT, Ordering::Relaxed);
        let first = map.unit_of(address);
        // One block's span (a large block, or a bag of one object) may go to the hold; a bag of
        // several objects that fell empty goes to the lists.
        let head = map.tag(address);
        let one_block = head.kind() == Kind::Large
            || (head.kind() == Kind::Bag && head.class().capacity() == 1);
        let counted = head.kind() == Kind::Bag && Self::fills(SpanUse::Bag(head.class()));
        for unit in first..first + units {
            map.set_tag(unit, Tag::UNUSED);
        }
        self.count_used(state, address, units, false, counted);
        if now.saturating_sub(state.recent_free_at) >= decommit.delay_ns {
            state.recent_free = 0;
        }
        state.recent_free = state.recent_free.max(units << UNIT_SHIFT);
        state.recent_free_at = now;
        if one_block && self.holds(units) && self.hold(state, map, address, units, now) {
            if !defer {
                self.purge_locked(state, map, now, decommit, Purge::Due);
            }
            return;
        }
        if self.canaries {
            // SAFETY: the span was handed out, committed, and its owner gives it up.
            unsafe { Self::write_end_canaries(address, units << UNIT_SHIFT) };
        }
        self.insert_coalesced(state, map, first, units, now, self.canaries);
        if !defer {
            self.purge_locked(state, map, now, decommit, Purge::Due);
        }
    }

    /// Decommits dirty spans that the policy says are due (all of them when `force`).
    pub fn purge(&self, map: &PageMap, decommit: DecommitPolicy, force: bool) {
        let now = os::monotonic_ns().max(1);
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        let how = if force { Purge::All } else { Purge::Due };
        self.purge_locked(state, map, now, decommit, how);
    }

    /// The maintenance thread's purge: a pool that handed out no span since the last one is
    /// quiet, and returns the free memory that waited the policy's own delay, however far
    /// demand stretched it (`decommit.rs`, [`decommit::Stretch`]), unless the program took
    /// back what earlier quiet purges returned (then the delay its pauses stretched); a busy
    /// pool purges as a free does. A program that goes quiet gets its memory back within a
    /// pass or two of that delay.
    pub fn purge_quiet(&self, map: &PageMap, decommit: DecommitPolicy) {
        let now = os::monotonic_ns().max(1);
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        let quiet = state.handouts == state.handouts_seen;
        state.handouts_seen = state.handouts;
        let how = if quiet { Purge::Quiet } else { Purge::Due };
        self.purge_locked(state, map, now, decommit, how);
    }

    /// Gives the pages of `[address, address + bytes)`, inside a span still in use (a bag), back
    /// to the OS. A chunk of the huge-page part is first taken off huge pages, as for a partial
    /// decommit (see `settle_huge_pages`); it goes back on them when the whole chunk is clean.
    ///
    /// # Safety
    /// The range must be page aligned, inside a span of this region handed out and not freed,
    /// and hold no live object.
    pub unsafe fn release_in_use(&self, address: usize, bytes: usize) {
        self.keep_range_off_huge_pages(address, bytes);
        // SAFETY: forwarded contract.
        unsafe { os::decommit(address as *mut u8, bytes) };
    }

    /// The range the frontier has passed: where spans may be.
    pub fn used_range(&self) -> (usize, usize) {
        (self.start, self.frontier_hint.load(Ordering::Acquire))
    }

    /// Takes the chunks of `[address, address + bytes)` in the huge-page part off huge pages
    /// (see `keep_off_huge_pages`), under the span lock.
    pub fn keep_range_off_huge_pages(&self, address: usize, bytes: usize) {
        if address + bytes <= self.huge_from {
            return;
        }
        let _guard = self.lock_span();
        self.keep_range_off_huge_pages_locked(address, bytes);
    }

    /// [`Self::keep_range_off_huge_pages`] with the span lock already held.
    fn keep_range_off_huge_pages_locked(&self, address: usize, bytes: usize) {
        let mut chunk = (address & !(CHUNK_BYTES - 1)).max(self.huge_from);
        while chunk < address + bytes {
            self.keep_off_huge_pages(chunk);
            chunk += CHUNK_BYTES;
        }
    }

    /// Writes canaries into the first and last words of a span being freed (default mode; see
    /// [`Region::free`]).
    ///
    /// # Safety
    /// The span of `bytes` at `address` is committed, open, and nobody's any more.
    unsafe fn write_end_canaries(address: usize, bytes: usize) {
        let last = address + bytes - 8;
        // SAFETY: both words lie in the span (contract above).
        unsafe {
            (address as *mut usize).write(canary_of(address));
            (last as *mut usize).write(canary_of(last));
        }
    }

    /// Bytes of free spans still committed (takes the span lock).
    pub fn dirty_bytes(&self) -> usize {
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &*self.state.get() };
        state.dirty_bytes + state.hold.bytes()
    }

    pub fn lock_for_fork(&self) {
        self.lock.acquire();
    }

    pub fn unlock_after_fork(&self) {
        self.lock.release();
    }
}
