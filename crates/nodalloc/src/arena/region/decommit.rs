//! When free committed memory goes back to the OS. The decision is a pure function of the
//! policy and the pool's counts ([`decommit_now`], table-tested below); `purge_locked` applies it
//! to the age list of dirty spans, oldest first.

use super::*;

/// What the decision needs to know about a pool.
#[derive(Clone, Copy, Debug)]
pub(super) struct DirtyPool {
    /// Bytes of free spans still committed.
    pub(super) dirty_bytes: usize,
    /// Bytes of spans handed out.
    pub(super) active_bytes: usize,
    /// The largest span freed recently, in bytes.
    pub(super) recent_free: usize,
    /// Dirty bytes the maintenance thread keeps prepared for a growing heap.
    pub(super) reserve: usize,
}

/// Whether the pool's oldest dirty span, free for `age_ns`, goes back to the OS now.
///
/// Nothing goes while the dirty bytes are within the retained budget. Past it, dirty memory up to
/// a share of what is in use (plus twice the largest recent free, so a program that frees and
/// re-allocates one big buffer finds it committed, plus the chunks prepared for a growing heap)
/// waits out the delay: a heap that churns reuses it without faults. Past that share, or once
/// the span has waited the delay, it goes at once.
pub(super) fn decommit_now(policy: DecommitPolicy, pool: DirtyPool, age_ns: u64) -> bool {
    if pool.dirty_bytes <= policy.retain_bytes {
        return false;
    }
    let young_cap = pool.active_bytes / DIRTY_SHARE + 2 * pool.recent_free + pool.reserve;
    age_ns >= policy.delay_ns || pool.dirty_bytes > young_cap
}

impl Region {
    /// Decommits dirty spans, oldest first, while [`decommit_now`] says so (all when `force`).
    /// The span lock must be held.
    pub(super) fn purge_locked(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        now: u64,
        decommit: DecommitPolicy,
        force: bool,
    ) {
        let active_bytes = self.active.load(Ordering::Relaxed);
        while !state.oldest.is_null() {
            let oldest = state.oldest;
            // SAFETY: the span lock is held; the age list holds heads of dirty free spans.
            let (units, freed_at) = unsafe { ((*oldest).units, (*oldest).role.free.freed_at) };
            let pool = DirtyPool {
                dirty_bytes: state.dirty_bytes,
                active_bytes,
                recent_free: state.recent_free,
                reserve: state.reserve,
            };
            if !force && !decommit_now(decommit, pool, now.saturating_sub(freed_at)) {
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
            let (merged, merged_units) = self.insert_coalesced(state, map, first, units, 0, false);
            let merged = map.address_of(merged);
            self.settle_huge_pages(address, bytes, merged, merged_units << UNIT_SHIFT);
        }
    }
}

/// Decommit policy, from the options (`NODALLOC_DECOMMIT_DELAY`, `NODALLOC_RETAIN`).
#[derive(Clone, Copy, Debug)]
pub struct DecommitPolicy {
    /// How long a dirty span may wait before it is decommitted.
    pub delay_ns: u64,
    /// Dirty bytes per pool that stay committed whatever their age (see [`decommit_now`]).
    pub retain_bytes: usize,
}

/// Free committed (dirty) bytes beyond the retained budget may wait out the decommit delay only
/// while they are at most 1/DIRTY_SHARE of the bytes in use.
pub(super) const DIRTY_SHARE: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MIB: usize = 1 << 20;

    /// Each row: retained budget, dirty, active and recent-free bytes, the span's age, and
    /// whether it goes now.
    #[test]
    pub(super) fn decommit_decision_table() {
        let policy = |retain_bytes| DecommitPolicy {
            delay_ns: 10 * MS,
            retain_bytes,
        };
        #[rustfmt::skip]
        let rows: &[(usize, usize, usize, usize, u64, bool, &str)] = &[
            // retain, dirty,   active,     recent,  age,     now?   why (reserve 0)
            (0,        MIB,     1024 * MIB, 0,       0,       false, "young, within 1/64 of use"),
            (0,        MIB,     1024 * MIB, 0,       10 * MS, true,  "waited the delay"),
            (0,        MIB,     1024 * MIB, 0,       9 * MS,  false, "one ms short of the delay"),
            (0,        17 * MIB, 1024 * MIB, 0,      0,       true,  "above 1/64 of use: at once"),
            (0,        16 * MIB, 1024 * MIB, 0,      0,       false, "exactly 1/64 of use waits"),
            (0,        20 * MIB, 1024 * MIB, 4 * MIB, 0,      false, "twice a recent 4 MiB free waits"),
            (0,        25 * MIB, 1024 * MIB, 4 * MIB, 0,      true,  "past the share and the recent free"),
            (32 * MIB, 17 * MIB, 1024 * MIB, 0,      10 * MS, false, "within the retained budget, even old"),
            (32 * MIB, 33 * MIB, 0,         0,       0,       true,  "past the budget with nothing in use"),
            (0,        1,       0,          0,       0,       true,  "an emptied heap gives back its last byte"),
            (0,        0,       0,          0,       u64::MAX, false, "nothing dirty"),
        ];
        for &(retain, dirty_bytes, active_bytes, recent_free, age, expected, why) in rows {
            let pool = DirtyPool {
                dirty_bytes,
                active_bytes,
                recent_free,
                reserve: 0,
            };
            assert_eq!(decommit_now(policy(retain), pool, age), expected, "{why}");
        }
        // Prepared chunks wait out the delay while the heap grows, then go like any others.
        let prepared = |age| {
            let pool = DirtyPool {
                dirty_bytes: 8 * MIB,
                active_bytes: 64 * MIB,
                recent_free: 0,
                reserve: 8 * MIB,
            };
            decommit_now(policy(0), pool, age)
        };
        assert!(!prepared(0), "a reserve of prepared chunks is kept");
        assert!(prepared(10 * MS), "an unused one goes after the delay");
    }
}
