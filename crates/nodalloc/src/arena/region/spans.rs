//! The span pool's free spans: size buckets, coalescing through the page map's boundary tags,
//! the age list of dirty spans, carving a request out of a free span, and advancing the
//! frontier. All under the span lock.

use super::*;

impl Region {
    /// Finds a free span of at least `units` (aligned) and carves the request from it.
    pub(super) fn take_free(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
        align_units: usize,
    ) -> Option<(usize, bool)> {
        let first = bucket_of(units);
        let clean_fit = first_fit(
            state,
            map,
            CLEAN,
            first,
            NUM_BUCKETS - 1,
            units,
            align_units,
        );
        // A clean fit is used only when no dirty span fits in its bucket, the ones below it, or
        // the next few non-empty ones: reusing committed memory costs no page faults, and dirty
        // memory that is reused never has to be decommitted.
        let last = clean_fit.map_or(NUM_BUCKETS - 1, |(.., bucket)| {
            search_limit(
                state.nonempty[DIRTY] | state.nonempty[CLEAN],
                bucket,
                DIRTY_SEARCH_BUCKETS,
            )
        });
        if let Some((candidate, span_units, offset, _)) =
            first_fit(state, map, DIRTY, first, last, units, align_units)
        {
            let head = map.unit_of_meta(candidate);
            let address = self.carve(state, map, candidate, head, span_units, offset, units);
            return Some((address, false));
        }
        if align_units == 1 && units >= MIX_MIN_UNITS {
            if let Some(address) = self.take_mixed(state, map, units) {
                return Some((address, false));
            }
        }
        let (candidate, span_units, offset, _) = clean_fit?;
        if !self.charge(units << UNIT_SHIFT) {
            return None;
        }
        let head = map.unit_of_meta(candidate);
        let address = self.carve(state, map, candidate, head, span_units, offset, units);
        Some((address, true))
    }

    /// Hands out a large request that no dirty span fits whole over a recently freed dirty span
    /// and the clean free spans on either side of it, so only the clean part faults in.
    ///
    /// Dirty and clean spans never merge, so without this a program that frees a 15 MiB block
    /// and asks for 20 MiB faults in all 20 MiB, from a clean span or past the frontier, while
    /// the 15 MiB wait to be decommitted (mimalloc-bench's `malloc-large` faulted in 10.8 GiB
    /// that way over 30 GiB allocated). Looks at the [`MIX_CANDIDATES`] newest dirty spans and
    /// takes the one that reuses the most committed memory; the request covers it whole, taking
    /// what it lacks from the clean span after it first, then the one before it.
    pub(super) fn take_mixed(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
    ) -> Option<usize> {
        // The best candidate: the dirty span, and the clean spans before and after it.
        let mut best: Option<(FreeSpan, Option<FreeSpan>, Option<FreeSpan>)> = None;
        let mut dirty = state.newest;
        let mut looked = 0;
        while !dirty.is_null() && looked < MIX_CANDIDATES {
            looked += 1;
            // SAFETY: the span lock is held; the age list holds heads of dirty free spans.
            let (dirty_units, older) = unsafe { ((*dirty).units, (*dirty).role.free.age.older) };
            let meta = dirty;
            dirty = older;
            if dirty_units >= units
                || best.is_some_and(|((_, _, best_units), ..)| best_units >= dirty_units)
            {
                continue;
            }
            let head = map.unit_of_meta(meta);
            let before = clean(self.free_span_before(map, map.address_of(head)));
            let after = clean(self.free_span_at(state, map, map.address_of(head + dirty_units)));
            let room = |side: Option<FreeSpan>| side.map_or(0, |(_, _, length)| length);
            if dirty_units + room(before) + room(after) >= units {
                best = Some(((meta, head, dirty_units), before, after));
            }
        }
        let ((dirty, head, dirty_units), before, after) = best?;
        let lacking = units - dirty_units;
        if !self.charge(lacking << UNIT_SHIFT) {
            return None;
        }
        let from_after = after.map_or(0, |(_, _, length)| length.min(lacking));
        let from_before = lacking - from_after;
        // The whole dirty span goes to the program (its canaries checked by the carve), then
        // the end of the clean span before it and the start of the one after it.
        self.carve(state, map, dirty, head, dirty_units, 0, dirty_units);
        if let Some((meta, first, length)) = after.filter(|_| from_after > 0) {
            self.carve(state, map, meta, first, length, 0, from_after);
        }
        if let Some((meta, first, length)) = before.filter(|_| from_before > 0) {
            self.carve(
                state,
                map,
                meta,
                first,
                length,
                length - from_before,
                from_before,
            );
        }
        state.fresh_taken += lacking << UNIT_SHIFT;
        // The clean part: memory decommitted before, handed out again.
        Self::note_retaken(state, lacking << UNIT_SHIFT);
        Some(map.address_of(head - from_before))
    }

    /// The free span that ends just before `address` (found by the free head or tail tag of
    /// its last unit, which records its length).
    fn free_span_before(&self, map: &PageMap, address: usize) -> Option<FreeSpan> {
        if address <= self.start {
            return None;
        }
        let last = address - UNIT;
        if !matches!(map.tag(last).kind(), Kind::Free | Kind::FreeTail) {
            return None;
        }
        // SAFETY: the span lock is held; free heads and tails record the span length.
        let length = unsafe { (*map.meta(map.unit_of(last))).units };
        let head = map.unit_of(last) + 1 - length;
        Some((map.meta(head), head, length))
    }

    /// The free span that starts at `address`, below the frontier.
    fn free_span_at(&self, state: &PoolState, map: &PageMap, address: usize) -> Option<FreeSpan> {
        if address >= state.frontier || map.tag(address).kind() != Kind::Free {
            return None;
        }
        let head = map.unit_of(address);
        let meta = map.meta(head);
        // SAFETY: the span lock is held; `meta` heads a free span, which records its length.
        Some((meta, head, unsafe { (*meta).units }))
    }

    /// Cuts `[offset, offset + units)` out of the free span at `head`, returning the address.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn carve(
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
        let free = unsafe { (*meta).role.free };
        let after = span_units - offset - units;
        let span = map.address_of(head);
        if free.canary && offset == 0 {
            check_canary(span, span);
        }
        if free.tail_canary && after == 0 {
            check_canary(span, map.address_of(head + span_units) - 8);
        }
        self.remove_free(state, meta);
        if offset > 0 {
            self.insert_free(state, map, head, offset, free.freed_at);
            // SAFETY: as above; the span just inserted keeps the head, and with it the canary.
            unsafe { (*map.meta(head)).role.free.canary = free.canary };
        }
        if after > 0 {
            let rest = head + offset + units;
            self.insert_free(state, map, rest, after, free.freed_at);
            // SAFETY: as above; the span just inserted keeps the tail, and with it its canary.
            unsafe { (*map.meta(rest)).role.free.tail_canary = free.tail_canary };
        }
        map.address_of(head + offset)
    }

    pub(super) fn advance_frontier(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        units: usize,
        align_units: usize,
    ) -> Option<usize> {
        // A clean free span touching the frontier is extended rather than stranded.
        let mut start = state.frontier;
        if let Some((meta, head, _)) = clean(self.free_span_before(map, start)) {
            self.remove_free(state, meta);
            start = map.address_of(head);
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
        let new_frontier = self.frontier_for(needed_end).max(state.frontier);
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

    pub(super) fn tag_in_use(&self, map: &PageMap, address: usize, units: usize, usage: SpanUse) {
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
                role: Role::new_free(0),
            };
        }
    }

    /// Inserts a free span, first merging it with free neighbours in the same state (dirty with
    /// dirty, clean with clean). `freed_at` 0 means clean.
    /// Returns the merged span's first unit and length.
    pub(super) fn insert_coalesced(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        mut first: usize,
        mut units: usize,
        freed_at: u64,
        canary: bool,
    ) -> (usize, usize) {
        let dirty = freed_at != 0;
        // Whether the merged span's head and tail hold canaries: the inserted span's, or its
        // neighbours' when it joins them.
        let mut head_canary = canary && dirty;
        let mut tail_canary = canary && dirty;
        if let Some((meta, head, length)) = self.free_span_before(map, map.address_of(first)) {
            // SAFETY: the span lock is held; `meta` heads a free span.
            let free = unsafe { (*meta).role.free };
            if (free.freed_at != 0) == dirty {
                // Its tail goes inside the merged span: its canary's last chance.
                if free.tail_canary {
                    check_canary(map.address_of(head), map.address_of(first) - 8);
                }
                head_canary = free.canary;
                self.remove_free(state, meta);
                map.set_tag(head + length - 1, Tag::UNUSED);
                first = head;
                units += length;
            }
        }
        let right = map.address_of(first + units);
        if let Some((meta, head, length)) = self.free_span_at(state, map, right) {
            // SAFETY: the span lock is held; `meta` heads a free span.
            let free = unsafe { (*meta).role.free };
            if (free.freed_at != 0) == dirty {
                // Its head goes inside the merged span: its canary's last chance.
                if free.canary {
                    check_canary(right, right);
                }
                tail_canary = free.tail_canary;
                self.remove_free(state, meta);
                map.set_tag(head, Tag::UNUSED);
                units += length;
            }
        }
        // A merged dirty span keeps the newest time: it is only as old as its youngest part.
        self.insert_free(state, map, first, units, freed_at);
        // SAFETY: the span lock is held; `first` heads the span just inserted.
        unsafe {
            (*map.meta(first)).role.free.canary = head_canary;
            (*map.meta(first)).role.free.tail_canary = tail_canary;
        }
        (first, units)
    }

    /// Puts a span into its bucket (and the age list and `dirty_bytes` if dirty), writing its
    /// boundary tags.
    pub(super) fn insert_free(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        first: usize,
        units: usize,
        freed_at: u64,
    ) {
        let meta = map.meta(first);
        let bucket = bucket_of(units);
        let set = set_of(freed_at);
        self.note_free_head(map.address_of(first));
        // SAFETY: the span lock is held; the span is free and these descriptors are ours.
        unsafe {
            *meta = UnitMeta {
                units,
                next: state.buckets[set][bucket],
                prev: null_mut(),
                role: Role::new_free(freed_at),
            };
            if !state.buckets[set][bucket].is_null() {
                (*state.buckets[set][bucket]).prev = meta;
            }
            if freed_at != 0 {
                state.dirty_bytes += units << UNIT_SHIFT;
                (*meta).role.free.age.older = state.newest;
                if state.newest.is_null() {
                    state.oldest = meta;
                } else {
                    (*state.newest).role.free.age.newer = meta;
                }
                state.newest = meta;
            }
            if units > 1 {
                (*map.meta(first + units - 1)).units = units;
            }
        }
        state.buckets[set][bucket] = meta;
        state.nonempty[set] |= 1 << bucket;
        map.set_tag(first, Tag::FREE);
        if units > 1 {
            map.set_tag(first + units - 1, Tag::FREE_TAIL);
        }
    }

    /// Unlinks a free span from its bucket and, if dirty, from the age list and `dirty_bytes`.
    /// Leaves its tags.
    pub(super) fn remove_free(&self, state: &mut PoolState, meta: *mut UnitMeta) {
        // SAFETY: the span lock is held; `meta` heads a free span linked into our lists.
        unsafe {
            let bucket = bucket_of((*meta).units);
            let set = set_of((*meta).role.free.freed_at);
            if (*meta).prev.is_null() {
                state.buckets[set][bucket] = (*meta).next;
                if (*meta).next.is_null() {
                    state.nonempty[set] &= !(1 << bucket);
                }
            } else {
                (*(*meta).prev).next = (*meta).next;
            }
            if !(*meta).next.is_null() {
                (*(*meta).next).prev = (*meta).prev;
            }
            if (*meta).role.free.freed_at != 0 {
                state.dirty_bytes -= (*meta).units << UNIT_SHIFT;
                let AgeLinks { older, newer } = (*meta).role.free.age;
                if older.is_null() {
                    state.oldest = newer;
                } else {
                    (*older).role.free.age.newer = newer;
                }
                if newer.is_null() {
                    state.newest = older;
                } else {
                    (*newer).role.free.age.older = older;
                }
            }
            (*meta).next = null_mut();
            (*meta).prev = null_mut();
        }
    }
}

/// A free span: its descriptor, first unit and length.
type FreeSpan = (*mut UnitMeta, usize, usize);

/// The first span of bucket set `set`, in the buckets from `from` to `to`, that fits an
/// aligned request of `units`: its descriptor, length, the request's offset in it, and its
/// bucket. An exact bucket's every span fits an unaligned request; a log bucket's first 16 are
/// looked at, and the smallest of them that fits is taken (the first of its length), so a
/// bucket's bigger spans stay whole for bigger requests: a program that replaces twenty blocks
/// of 5–25 MiB at random needed 20 MiB less dirty memory to find its requests a committed
/// span. The span lock must be held.
fn first_fit(
    state: &PoolState,
    map: &PageMap,
    set: usize,
    from: usize,
    to: usize,
    units: usize,
    align_units: usize,
) -> Option<(*mut UnitMeta, usize, usize, usize)> {
    let mut bucket = from;
    while bucket <= to.min(NUM_BUCKETS - 1) {
        let mask = state.nonempty[set] >> bucket;
        if mask == 0 {
            return None;
        }
        bucket += mask.trailing_zeros() as usize;
        if bucket > to {
            return None;
        }
        let mut candidate = state.buckets[set][bucket];
        let mut scanned = 0;
        let mut best: Option<(*mut UnitMeta, usize, usize, usize)> = None;
        while !candidate.is_null() && scanned < 16 {
            // SAFETY: the span lock is held; bucket lists hold heads of free spans.
            let span_units = unsafe { (*candidate).units };
            let head = map.unit_of_meta(candidate);
            if let Some(offset) = fit(map.address_of(head), span_units, units, align_units) {
                if units <= EXACT_BUCKETS || span_units == units {
                    return Some((candidate, span_units, offset, bucket));
                }
                match best {
                    Some((_, best_units, ..)) if best_units <= span_units => {}
                    _ => best = Some((candidate, span_units, offset, bucket)),
                }
            }
            // SAFETY: as above.
            candidate = unsafe { (*candidate).next };
            scanned += 1;
        }
        if best.is_some() {
            return best;
        }
        bucket += 1;
    }
    None
}

/// The `more`-th bucket after `bucket` set in `nonempty`, or the last bucket when fewer are.
fn search_limit(nonempty: u128, bucket: usize, more: usize) -> usize {
    // The bits above `bucket` (none when it is the last).
    let mut above = nonempty & !(u128::MAX >> (NUM_BUCKETS - 1 - bucket));
    let mut limit = bucket;
    for _ in 0..more {
        if above == 0 {
            return NUM_BUCKETS - 1;
        }
        limit = above.trailing_zeros() as usize;
        above &= above - 1;
    }
    limit
}

/// `span` if it is clean (decommitted).
fn clean(span: Option<FreeSpan>) -> Option<FreeSpan> {
    // SAFETY: the caller holds the span lock; the descriptor heads a free span.
    span.filter(|&(meta, ..)| unsafe { (*meta).role.free.freed_at } == 0)
}

/// Where in a free span `[start, start + span_units)` an aligned request of `units` fits:
/// the offset in units, preferring the span's start.
pub(super) fn fit(
    start: usize,
    span_units: usize,
    units: usize,
    align_units: usize,
) -> Option<usize> {
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

pub(super) fn bucket_of(units: usize) -> usize {
    if units <= EXACT_BUCKETS {
        units - 1
    } else {
        let log = (usize::BITS - 1 - units.leading_zeros()) as usize; // 2^log <= units
        (EXACT_BUCKETS + log - 6).min(NUM_BUCKETS - 1)
    }
}

/// The word [`Region::free`] writes into the first word of a freed span (pools with canaries):
/// a constant mixed with the address, so the canary of one span read at another does not match.
pub(crate) fn canary_of(address: usize) -> usize {
    0x6672_6565_645f_7370 ^ address.rotate_left(23)
}

/// Checks the canary at `at` (the first or the last word) of the free dirty span that starts
/// at `span` (or of a large object a thread keeps, `thread/large.rs`), aborting with a report
/// that names the freed block if a write changed it. The span lock is held (or the thread
/// keeps the object).
pub(crate) fn check_canary(span: usize, at: usize) {
    // SAFETY: the caller holds the span lock of a dirty free span of this pool, or keeps the
    // freed object, and `at` is its first or last word: committed memory nobody else may
    // touch.
    let word = unsafe { (at as *const usize).read() };
    if word != canary_of(at) {
        damaged_canary(span, at, word);
    }
}

/// Reports freed memory that was written to: a canary [`Region::free`] wrote into the span
/// that starts at `span` no longer holds its value.
#[cold]
#[inline(never)]
fn damaged_canary(span: usize, at: usize, word: usize) -> ! {
    os::fatal(|w| {
        w.str("heap corruption: the freed block at ").hex(span);
        if at == span {
            w.str(" was written to at its start (it held ")
                .hex(word)
                .str("): a write past the end of the block before it, or a write after free");
        } else {
            w.str(" was written to at its last word, ")
                .hex(at)
                .str(" (it held ")
                .hex(word)
                .str("): a write before the start of the block at ")
                .hex(at + 8)
                .str(", or a write after free");
        }
    })
}
