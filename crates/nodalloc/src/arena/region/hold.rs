//! The hold (default mode): the span of [`HOLD_MIN_UNITS`] to [`HOLD_MAX_UNITS`] units freed
//! last (a large block of 256 KiB to 2 MiB, or the bag of a class whose one object is that big;
//! not a bag of several objects that fell empty) stays out of the
//! free lists until the next such free, made inaccessible (`PROT_NONE`), while the hold's rate
//! allows. So the next request of its size never gets the block just freed, and a write or a
//! read through a dangling pointer to it faults, as it does for a block glibc unmapped at its
//! `free`.
//!
//! What it costs: one span kept out of reuse (released to the free lists at the next such free,
//! when the pool runs short, or by the decommit rule; a guarded one gives its pages back in
//! place and stays guarded), two `mprotect` calls and a release's bookkeeping. The rate is
//! bounded by tokens ([`GUARD_BURST`], one more per [`GUARD_REFILL_NS`]): a program that frees
//! such spans in a loop pays for a hundred a second at most; its other frees go to the free
//! lists at once, as without the hold (the span held last stays held). A held span keeps its
//! tags `UNUSED` and is in no list: nothing can hand it out, merge with it, or free it (a
//! second free of it is an invalid pointer).

use super::*;

/// The smallest span held: 256 KiB, the size where glibc `mmap`s a block of its own.
pub const HOLD_MIN_UNITS: usize = 8;
/// The largest span held: 2 MiB. A larger one goes back to the free lists at once, so a program
/// that frees and allocates big buffers in turn reuses the same memory.
pub const HOLD_MAX_UNITS: usize = CHUNK_UNITS;
/// Guarded spans the rate allows at once, and the time it takes to allow one more. A burst of
/// eight covers a program that frees a few big blocks now and then; a loop of frees pays two
/// `mprotect` calls a hold (some 20 µs with the faults of the span it turns to meanwhile), which
/// a burst of 64 made 1.3 ms of a 1 024-pair loop of 1 MiB blocks (1.9× glibc's time, 1.2× at 8).
/// Both calls run under the pool's span lock, and each takes the process's memory map for
/// writing: at a token a millisecond, mimalloc-bench's mstress (two threads that free such
/// blocks all the time) made 2 996 `mprotect` calls and waited 1 271 times on a futex, where it
/// made 47 and 258 without the hold; at a token every 10 ms, 404 and 434 (docs/JOURNAL.md,
/// "Thirty-third round"). glibc, whose `munmap` at a free the hold stands in for, stops
/// unmapping a size after its first free of it (its mmap threshold rises to the freed size).
pub const GUARD_BURST: u64 = 8;
pub const GUARD_REFILL_NS: u64 = 10_000_000;

/// Whether a pool that holds spans (default mode) holds a span of `units`.
pub fn holds_units(units: usize) -> bool {
    (HOLD_MIN_UNITS..=HOLD_MAX_UNITS).contains(&units)
}

/// The hold's state, in the pool state (span lock).
#[derive(Default)]
pub(super) struct Hold {
    /// The held span's first byte (0: none), its units, when it was freed, and whether it is
    /// `PROT_NONE`.
    address: usize,
    units: usize,
    freed_at: u64,
    guarded: bool,
    /// Its pages were given back in place (a guarded span waits out no delay committed).
    decommitted: bool,
    /// The guard's tokens and when they were last counted.
    tokens: u64,
    counted_at: u64,
}

impl Hold {
    /// How long the held span has been free, if there is one and it is still committed.
    pub(super) fn committed_age(&self, now: u64) -> Option<u64> {
        (self.bytes() != 0).then(|| now.saturating_sub(self.freed_at))
    }

    /// Bytes of the held span still committed (0 for none).
    pub(super) fn bytes(&self) -> usize {
        if self.address == 0 || self.decommitted {
            0
        } else {
            self.units << UNIT_SHIFT
        }
    }

    /// Takes a token of the guard's rate, if one is left at `now`.
    fn take_token(&mut self, now: u64) -> bool {
        let earned = now.saturating_sub(self.counted_at) / GUARD_REFILL_NS;
        if earned > 0 || self.counted_at == 0 {
            self.tokens = if self.counted_at == 0 {
                GUARD_BURST
            } else {
                (self.tokens + earned).min(GUARD_BURST)
            };
            self.counted_at = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

impl Region {
    /// Whether a span of `units` freed now goes to the hold.
    pub(super) fn holds(&self, units: usize) -> bool {
        self.canaries && holds_units(units)
    }

    /// Whether a span of `units` freed now would go to the hold (its size is held and the rate
    /// allows, as far as the last free that reached the hold tells), without the lock: a
    /// thread that keeps large objects for reuse (`thread/large.rs`) leaves such a span to the
    /// hold, so a program that frees big blocks now and then still gets the hold's guard. The
    /// clock is read only for a size the hold takes.
    pub fn hold_takes(&self, units: usize) -> bool {
        self.holds(units) && os::monotonic_ns() >= self.hold_open_at.load(Ordering::Relaxed)
    }

    /// Puts a freed span (tags already `UNUSED`, uncounted from use) in the hold, guarded, and
    /// releases the span held before it, if the rate allows; false (nothing done) when it does
    /// not, and the span goes to the free lists as any other. Span lock held.
    pub(super) fn hold(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        address: usize,
        units: usize,
        now: u64,
    ) -> bool {
        let took = state.hold.take_token(now);
        let open_at = if state.hold.tokens == 0 {
            state.hold.counted_at + GUARD_REFILL_NS
        } else {
            0
        };
        self.hold_open_at.store(open_at, Ordering::Relaxed);
        if !took {
            return false;
        }
        self.release_held(state, map);
        // A refusal (the kernel's mapping limit) leaves the span held open.
        let guarded = os::protect(address as *mut u8, units << UNIT_SHIFT);
        let hold = &mut state.hold;
        hold.address = address;
        hold.units = units;
        hold.freed_at = now;
        hold.guarded = guarded;
        hold.decommitted = false;
        true
    }

    /// Releases the held span into the free lists (dirty, with canaries), opened again if it
    /// was guarded. Span lock held. A span the kernel will not open again (its mapping limit)
    /// stays out of every list: lost, rather than handed out inaccessible.
    pub(super) fn release_held(&self, state: &mut PoolState, map: &PageMap) {
        let hold = &mut state.hold;
        if hold.address == 0 {
            return;
        }
        let (address, units, freed_at) = (hold.address, hold.units, hold.freed_at);
        let (guarded, decommitted) = (hold.guarded, hold.decommitted);
        hold.address = 0;
        let bytes = units << UNIT_SHIFT;
        if guarded && !os::commit(address as *mut u8, bytes) {
            return;
        }
        if decommitted {
            // Clean: it reads as zero and is no longer charged. Merged into a wholly clean
            // chunk, that chunk may go back on huge pages.
            let (merged, merged_units) =
                self.insert_coalesced(state, map, map.unit_of(address), units, 0, false);
            let merged = map.address_of(merged);
            self.settle_huge_pages(address, bytes, merged, merged_units << UNIT_SHIFT);
            return;
        }
        // SAFETY: the span is committed and open, and nothing refers to it (it was freed).
        unsafe { Self::write_end_canaries(address, bytes) };
        self.insert_coalesced(state, map, map.unit_of(address), units, freed_at, true);
    }

    /// The held span, once the decommit rule says it goes (`purge_locked`): a guarded span
    /// gives its pages back where it is, still held and inaccessible; an open one is released
    /// to the free lists, as the newest dirty span, which the rule then decommits. Span lock
    /// held; the held span is committed.
    pub(super) fn settle_held(&self, state: &mut PoolState, map: &PageMap) {
        let hold = &mut state.hold;
        if !hold.guarded {
            return self.release_held(state, map);
        }
        hold.decommitted = true;
        let bytes = hold.units << UNIT_SHIFT;
        let address = hold.address;
        // A partial decommit of a huge-page chunk takes it off huge pages (see `purge`).
        if address + bytes > self.huge_from {
            self.keep_range_off_huge_pages_locked(address, bytes);
        }
        // SAFETY: the held span is free (no live object) and inside our region.
        unsafe { os::decommit(address as *mut u8, bytes) };
        self.uncharge(bytes);
        self.decommitted.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Releases the held span now (tests of the free lists' own mechanics).
    #[cfg(test)]
    pub fn release_held_now(&self, map: &PageMap) {
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        self.release_held(state, map);
    }

    /// The held span, for tests: its address (0: none) and whether it is guarded.
    #[cfg(test)]
    pub fn held(&self) -> (usize, bool) {
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let hold = unsafe { &(*self.state.get()).hold };
        (hold.address, hold.address != 0 && hold.guarded)
    }
}
