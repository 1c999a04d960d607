//! **Preparation**: the maintenance thread faults chunks in ahead of demand, so a thread that
//! carves new bags finds their pages resident instead of paying the kernel's page clearing
//! inside `malloc` (the first touch of a fresh 2 MiB huge page costs ~100 µs).
//!
//! Only the dense pool is prepared: its chunks are the ones nodalloc fills itself, carving
//! small objects side by side, so a populated chunk is memory the program would have touched
//! anyway. The sparse pool's large objects and big bags stay untouched until the program
//! touches them: memory it uses sparsely costs only the pages it touches.
//!
//! Demand is what the pool hands out that would fault (from the frontier or a clean span) or
//! that came from prepared chunks. While there was some within the last [`PREPARE_WINDOW_NS`],
//! the pool keeps as much dirty free memory as it took between two looks of the maintenance
//! thread (whole chunks, at least one, at most [`PREPARED_CHUNKS`]): the frontier moves
//! over a chunk, which is populated (`MADV_POPULATE_WRITE`) with the span lock dropped, then
//! enters the pool as a dirty free span. From there the pool's ordinary rules apply: dirty spans
//! are reused first, stay charged to the commit limit until decommitted (an allocation the limit
//! refuses decommits them first), and an unused one goes back to the OS after the decommit
//! delay once demand pauses. The reserve counts toward the dirty memory allowed to wait out the
//! delay (`decommit_now`), so the next free does not decommit it at once.

use super::*;

/// The most chunks of dirty free memory a pool with recent demand keeps ready (it keeps what
/// it took between two looks of the maintenance thread, at least one chunk).
pub(super) const PREPARED_CHUNKS: usize = 4;

/// How long demand keeps preparation going.
pub const PREPARE_WINDOW_NS: u64 = 200_000_000;

impl Region {
    /// The maintenance thread's step for this pool: follows demand and populates chunks until
    /// the pool holds its reserve of dirty free memory. True while the pool wants preparation
    /// (the caller comes back soon); false when it is idle or cannot grow.
    pub fn prepare(&self, map: &PageMap, now: u64) -> bool {
        if self.chunk_nodes.is_null() {
            return false;
        }
        let mut guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        if state.fresh_taken != state.fresh_seen {
            // The reserve covers the most the pool took between two looks within the window
            // (what it took before the window, since the program started or paused, is no
            // rate): a heap that grows slowly keeps one chunk ready, a fast one up to
            // PREPARED_CHUNKS.
            let taken = state.fresh_taken.wrapping_sub(state.fresh_seen);
            let want = if now < state.wanted_until {
                taken.next_multiple_of(CHUNK_BYTES)
            } else {
                CHUNK_BYTES
            }
            .clamp(CHUNK_BYTES, PREPARED_CHUNKS * CHUNK_BYTES);
            state.reserve = state.reserve.max(want);
            state.fresh_seen = state.fresh_taken;
            state.wanted_until = now.saturating_add(PREPARE_WINDOW_NS);
        }
        if now >= state.wanted_until {
            state.reserve = 0;
            state.prepared_from = 0;
            return false;
        }
        loop {
            // SAFETY: the span lock is held (taken again after each population).
            let state = unsafe { &mut *self.state.get() };
            if state.preparing != 0 || state.dirty_bytes >= state.reserve {
                return true;
            }
            let chunk = state.frontier;
            // Within the pool's first bytes the frontier moves by fence steps: nothing is
            // prepared there (the fence stays close behind the heap's blocks).
            if (chunk - self.start) % CHUNK_BYTES != 0
                || chunk + CHUNK_BYTES > self.end
                || !self.charge(CHUNK_BYTES)
            {
                return false;
            }
            if !self.move_frontier(state, map, chunk + CHUNK_BYTES) {
                self.uncharge(CHUNK_BYTES);
                return false;
            }
            // Past the frontier but in no list: nobody can hand the chunk out, and its tags
            // (unused) make every free into it a misuse, until it is inserted below.
            state.preparing = chunk;
            if state.prepared_from == 0 {
                state.prepared_from = chunk;
            }
            drop(guard);
            // SAFETY: the chunk is committed (the frontier passed it), chunk aligned, and
            // nobody else can reach it while `preparing` names it.
            unsafe { os::populate(chunk as *mut u8, CHUNK_BYTES) };
            guard = self.lock_span();
            // SAFETY: the span lock is held again.
            self.finish_preparing(unsafe { &mut *self.state.get() }, map);
        }
    }

    /// Puts the chunk being prepared into the pool as a dirty free span (span lock held). Also
    /// run in a forked child, where the thread that was populating it does not exist: its
    /// pages are resident or not, either way it is committed, free memory.
    pub(super) fn finish_preparing(&self, state: &mut PoolState, map: &PageMap) {
        let chunk = core::mem::take(&mut state.preparing);
        if chunk == 0 {
            return;
        }
        let now = os::monotonic_ns().max(1);
        self.insert_coalesced(state, map, map.unit_of(chunk), CHUNK_UNITS, now, false);
        self.prepared.fetch_add(1, Ordering::Relaxed);
    }

    /// In a forked child, after the span lock was released: finishes a preparation the
    /// parent's maintenance thread was in the middle of.
    pub fn recover_after_fork(&self, map: &PageMap) {
        let _guard = self.lock_span();
        // SAFETY: the span lock is held.
        let state = unsafe { &mut *self.state.get() };
        self.finish_preparing(state, map);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use crate::arena::Pool;
    use crate::size_class::class_of;

    #[test]
    fn the_reserve_follows_what_the_pool_took_between_two_looks() {
        let arena = test_arena(1, 256 << 20, 0);
        let pool = arena.pool(0, Pool::Dense);
        let map = arena.map();
        let class = class_of(64, 8).unwrap();
        let take = |bytes: usize| {
            for _ in 0..bytes / class.bag_bytes() {
                arena
                    .alloc_span_on(0, class.bag_units(), 1, SpanUse::Bag(class))
                    .unwrap();
            }
        };
        // SAFETY: no other thread uses this arena; a copy of two fields.
        let state = || unsafe { ((*pool.state.get()).reserve, (*pool.state.get()).dirty_bytes) };
        let now = 1_000_000;
        assert!(!pool.prepare(map, now), "no demand yet");
        assert_eq!(pool.prepared.load(Ordering::Relaxed), 0);
        // Demand since the program started is no rate: one chunk would be kept ready, but the
        // frontier is within the pool's first bytes, where it moves by fence steps: nothing is
        // prepared there.
        take(5 << 20);
        assert_ne!(
            (pool.frontier_hint.load(Ordering::Relaxed) - pool.start) % CHUNK_BYTES,
            0
        );
        assert!(!pool.prepare(map, now));
        assert_eq!(state(), (CHUNK_BYTES, 0));
        assert_eq!(pool.prepared.load(Ordering::Relaxed), 0);
        // 5 MiB taken between two looks, the frontier past the fine steps: three chunks.
        take(5 << 20);
        assert!(pool.prepare(map, now + 1_000));
        assert_eq!(state().0, 3 * CHUNK_BYTES);
        assert!(state().1 >= 3 * CHUNK_BYTES);
        // More than PREPARED_CHUNKS' worth: capped.
        take(20 << 20);
        assert!(pool.prepare(map, now + 2_000));
        assert_eq!(state().0, PREPARED_CHUNKS * CHUNK_BYTES);
        // Demand pauses: no reserve, nothing prepared any more.
        let prepared = pool.prepared.load(Ordering::Relaxed);
        assert!(!pool.prepare(map, now + 3_000 + PREPARE_WINDOW_NS));
        assert_eq!(state().0, 0);
        assert_eq!(pool.prepared.load(Ordering::Relaxed), prepared);
    }
}
