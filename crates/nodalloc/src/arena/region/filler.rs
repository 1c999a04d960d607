//! The dense pool's filler (TCMalloc's Temeraire idea): every chunk below the frontier sits in
//! one of 65 lists by its count of units in use, and a new bag goes to a free span in the
//! fullest chunk that has one, so a node's small objects occupy as few 2 MiB pages as possible
//! and the chunks that empty are the ones left alone. All under the span lock.
//!
//! Only the pool's own spans count and are placed this way: bags of the classes it is for
//! ([`Region::fills`]). Large blocks and bags of bigger classes come into a dense pool when
//! the sparse one is full (a small region under `RLIMIT_AS`), and live and die on another
//! rhythm. Counted, they made a chunk that held one look full, new small bags went into the
//! gaps beside it, and once it was freed those bags stayed behind as islands that cut the
//! freed memory into pieces: under `RLIMIT_AS=256M`, 30 MiB free in a 64 MiB dense pool had
//! no span of 4 MiB, with a small bag in nearly every chunk (docs/JOURNAL.md, "Twenty-fifth
//! round").

use super::*;

impl Region {
    /// The filler's choice (dense pools, unaligned requests up to half a chunk): a free span
    /// headed in the fullest chunk that has one of at least `units`, carved from its start.
    /// Chunks with none of the pool's own bags (level 0: empty, or holding only spans that
    /// came in from elsewhere) are left to the best-fit search. `None` when the pool has no
    /// filler or it found nothing (the best-fit search follows).
    pub(super) fn take_fullest(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
        align_units: usize,
    ) -> Option<(usize, bool)> {
        if self.chunk_nodes.is_null() || align_units != 1 || units > CHUNK_UNITS / 2 {
            return None;
        }
        // Full chunks (level CHUNK_UNITS) have no room; the rest from the fullest down to
        // level 1.
        let mut levels = state.fullness_nonempty & ((1u128 << CHUNK_UNITS) - 2);
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
                    let clean = unsafe { (*meta).role.free.freed_at } == 0;
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
    /// unit and length. The scan starts at the chunk's `scan_from` and moves it to the first
    /// listed free span it meets (of any length), or past the chunk when it meets none.
    pub(super) fn free_span_in_chunk(
        &self,
        state: &PoolState,
        map: &PageMap,
        chunk: usize,
        units: usize,
    ) -> Option<(*mut UnitMeta, usize, usize)> {
        let first = map.unit_of(self.start + chunk * CHUNK_BYTES);
        // SAFETY: the span lock is held and `chunk` is below the frontier, so its record is in
        // our array.
        let node = unsafe { &mut *self.chunk_nodes.add(chunk) };
        let mut unit = first + node.scan_from as usize;
        let mut first_free = None;
        let found = self.scan_chunk(state, map, &mut unit, first, units, &mut first_free);
        #[cfg(debug_assertions)]
        {
            // No listed free span starts before `scan_from`: the whole chunk's scan agrees.
            let (mut from_start, mut ignored) = (first, None);
            let whole = self.scan_chunk(state, map, &mut from_start, first, units, &mut ignored);
            debug_assert_eq!(
                whole.map(|found| found.1),
                found.map(|found| found.1),
                "chunk {chunk}: scan from {} missed a free span",
                node.scan_from
            );
        }
        node.scan_from = (first_free.unwrap_or(unit).min(first + CHUNK_UNITS) - first) as u32;
        found
    }

    /// The scan of [`Self::free_span_in_chunk`] from `unit` (left at the first unit past the
    /// chunk when nothing is found), noting the first listed free span in `first_free`.
    fn scan_chunk(
        &self,
        state: &PoolState,
        map: &PageMap,
        unit: &mut usize,
        first: usize,
        units: usize,
        first_free: &mut Option<usize>,
    ) -> Option<(*mut UnitMeta, usize, usize)> {
        while *unit < first + CHUNK_UNITS {
            let tag = map.tag(map.address_of(*unit));
            let meta = map.meta(*unit);
            let length = match tag.kind() {
                // SAFETY: the span lock is held; a Free tag heads a free span whose descriptor
                // records its length, and a bag or large span's first unit records its length.
                Kind::Free | Kind::Bag | Kind::Large => unsafe { (*meta).units },
                _ => 1,
            };
            // A head that is really listed (a tag left inside a merged span would not be).
            let listed = || {
                let bucket = bucket_of(length);
                // SAFETY: as above.
                let linked = unsafe { !(*meta).prev.is_null() };
                linked
                    || state.buckets[DIRTY][bucket] == meta
                    || state.buckets[CLEAN][bucket] == meta
            };
            if tag.kind() == Kind::Free && listed() {
                first_free.get_or_insert(*unit);
                if length >= units {
                    return Some((meta, *unit, length));
                }
            }
            *unit += length.max(1);
        }
        None
    }

    /// A free span is listed at `address`: the scan of its chunk must start there at the
    /// latest (dense pools).
    pub(super) fn note_free_head(&self, address: usize) {
        if self.chunk_nodes.is_null() {
            return;
        }
        let (chunk, unit) = self.chunk_and_unit(address);
        // SAFETY: the span lock is held; a listed span lies below the frontier, in a chunk
        // whose record is in our array.
        let node = unsafe { &mut *self.chunk_nodes.add(chunk) };
        node.scan_from = node.scan_from.min(unit);
    }

    /// The chunk of this pool that `address` lies in, and its unit there.
    fn chunk_and_unit(&self, address: usize) -> (usize, u32) {
        let offset = address - self.start;
        (
            offset / CHUNK_BYTES,
            ((offset % CHUNK_BYTES) >> UNIT_SHIFT) as u32,
        )
    }

    /// True for the spans the filler places and counts: bags of the classes a dense pool is
    /// for.
    pub(super) fn fills(usage: SpanUse) -> bool {
        crate::arena::Pool::for_use(usage) == crate::arena::Pool::Dense
    }

    /// Adds (or removes) `units` in-use units starting at `address` to the filler's counts of
    /// the chunks they lie in, moving each chunk to the list of its new count; a span that is
    /// not `counted` ([`Region::fills`]) only moves the scan's start past it.
    pub(super) fn count_used(
        &self,
        state: &mut PoolState,
        address: usize,
        units: usize,
        add: bool,
        counted: bool,
    ) {
        if self.chunk_nodes.is_null() {
            return;
        }
        let end = address + (units << UNIT_SHIFT);
        let mut from = address;
        while from < end {
            let (chunk, start_unit) = self.chunk_and_unit(from);
            let chunk_end = self.start + (chunk + 1) * CHUNK_BYTES;
            let here = ((end.min(chunk_end) - from) >> UNIT_SHIFT) as u32;
            self.unlink_chunk(state, chunk);
            // SAFETY: the span lock is held and the chunk is below the frontier.
            let node = unsafe { &mut *self.chunk_nodes.add(chunk) };
            let counted_here = if counted { here } else { 0 };
            if add {
                node.used += counted_here;
                // A span handed out over the scan's start: no free span starts inside it, and
                // its end is a span boundary (or the chunk's end).
                let end_unit = start_unit + here;
                if (start_unit..end_unit).contains(&node.scan_from) {
                    node.scan_from = end_unit;
                }
            } else {
                node.used -= counted_here;
            }
            debug_assert!(node.used as usize <= CHUNK_UNITS);
            self.link_chunk(state, chunk);
            from = chunk_end.min(end);
        }
    }

    /// Puts `chunk` at the head of the list of its count (span lock held).
    pub(super) fn link_chunk(&self, state: &mut PoolState, chunk: usize) {
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
    pub(super) fn unlink_chunk(&self, state: &mut PoolState, chunk: usize) {
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
}
