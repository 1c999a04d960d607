//! In-place resizing of a large span: growing into the free span after it (or past the
//! frontier when it ends there), and shrinking by returning its tail to the pool.

use super::*;

impl Region {
    /// Grows a large span in place to `new_units` if the units after it are free (or are the
    /// frontier). Returns false, changing nothing, otherwise.
    pub fn grow(&self, map: &PageMap, address: usize, old_units: usize, new_units: usize) -> bool {
        let _guard = self.lock_span();
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
            let frontier = self.frontier_for(needed_end);
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
        let mut retaken = 0;
        if !neighbour.is_null() {
            // SAFETY: as above.
            let (available, freed_at) =
                unsafe { ((*neighbour).units, (*neighbour).role.free.freed_at) };
            if freed_at == 0 {
                retaken = available.min(extra) << UNIT_SHIFT;
                new_bytes += retaken;
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
            let (available, free) = unsafe { ((*neighbour).units, (*neighbour).role.free) };
            let used = available.min(extra);
            // The object grows over the neighbour's head, and over its tail if it takes it all.
            if free.canary {
                spans::check_canary(next, next);
            }
            if free.tail_canary && used == available {
                spans::check_canary(next, next + (available << UNIT_SHIFT) - 8);
            }
            self.remove_free(state, neighbour);
            if available > used {
                let rest = map.unit_of(next) + used;
                self.insert_free(state, map, rest, available - used, free.freed_at);
                // SAFETY: the span lock is held; the rest keeps the neighbour's tail.
                unsafe { (*map.meta(rest)).role.free.tail_canary = free.tail_canary };
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
        self.count_used(state, next, extra, true, false);
        self.add_active(state, extra);
        state.handouts += 1;
        state.handout_at = os::monotonic_ns().max(1);
        if retaken != 0 {
            Self::note_retaken(state, retaken);
        }
        true
    }

    /// Shrinks a large span in place, returning its tail to the pool (as [`Region::free`]).
    pub fn shrink(
        &self,
        map: &PageMap,
        address: usize,
        old_units: usize,
        new_units: usize,
        decommit: DecommitPolicy,
        defer: bool,
    ) {
        debug_assert!(new_units >= 1 && new_units < old_units);
        {
            let _guard = self.lock_span();
            // SAFETY: the span lock is held; `address` heads a large span we own.
            unsafe { (*map.meta(map.unit_of(address))).units = new_units };
        }
        self.free(
            map,
            address + (new_units << UNIT_SHIFT),
            old_units - new_units,
            decommit,
            defer,
        );
    }
}
