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
    /// The most bytes the pool had in use within the last one or two decommit delays
    /// ([`PeakWindow`]): memory the program used that recently is likely to be used again.
    pub(super) recent_peak: usize,
    /// Young dirty bytes the pool keeps beyond the rule's cap because the cap proved too
    /// tight ([`CapBoost`]).
    pub(super) boost: usize,
}

/// Whether the pool's oldest dirty span, free for `age_ns`, goes back to the OS now.
///
/// Nothing goes while the dirty bytes are within the retained budget. Past it, dirty memory waits
/// out the delay while it is at most the larger of
/// - what the pool had in use at its recent peak beyond what it has in use now: a program whose
///   use falls and rises again within the delay (waves of threads, rounds that build and drop a
///   structure) reuses its memory without faulting it in again, and the pool never holds more
///   than it held at that peak;
/// - a share of what is in use plus twice the largest recent free, so a heap that churns, or a
///   program that frees and re-allocates one big buffer, finds it committed;
///
/// plus the chunks prepared for a growing heap, plus the boost a busy pool earned by taking
/// back what the cap returned (at most 1/BOOST_SHARE of what is in use). Past that, or once
/// the span has waited the delay, it goes at once.
pub(super) fn decommit_now(policy: DecommitPolicy, pool: DirtyPool, age_ns: u64) -> bool {
    if pool.dirty_bytes <= policy.retain_bytes {
        return false;
    }
    let churn = pool.active_bytes / DIRTY_SHARE + 2 * pool.recent_free;
    let fallen = pool.recent_peak.saturating_sub(pool.active_bytes);
    let boost = pool.boost.min(pool.active_bytes / BOOST_SHARE);
    let young_cap = churn.max(fallen) + pool.reserve + boost;
    age_ns >= policy.delay_ns || pool.dirty_bytes > young_cap
}

/// Which dirty spans a purge returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purge {
    /// Those [`decommit_now`] says are due, with the pool's stretched delay.
    Due,
    /// The maintenance thread's, for a pool that handed out nothing since its last pass: those
    /// due with the policy's own delay, as if demand had never stretched it, or with the
    /// delay pauses stretched (below).
    Quiet,
    /// All of them.
    All,
}

impl Region {
    /// Decommits dirty spans, oldest first, as `how` says. The span lock must be held.
    pub(super) fn purge_locked(
        &self,
        state: &mut PoolState,
        map: &PageMap,
        now: u64,
        decommit: DecommitPolicy,
        how: Purge,
    ) {
        let force = how == Purge::All;
        let stretched = state.stretch.delay(decommit.delay_ns);
        // Pauses: what quiet purges returned came back after the program's pause, so the pool
        // keeps its free memory (within the recent peak, whose window this is too) over a
        // pause twice as long, whether the pass finds it quiet or still busy with the end of
        // a burst.
        let paused = state.quiet_stretch.delay(decommit.delay_ns);
        let policy = DecommitPolicy {
            delay_ns: match how {
                Purge::Due => stretched.max(paused),
                Purge::Quiet => paused,
                Purge::All => decommit.delay_ns,
            },
            ..decommit
        };
        let active_bytes = self.active.load(Ordering::Relaxed);
        let recent_peak = if force {
            0
        } else {
            state.peak.recent(active_bytes, now, policy.delay_ns)
        };
        // The held span (`hold.rs`) is dirty memory too, and the newest: when the rule says it
        // goes, everything older goes as well.
        let pool_now = |state: &PoolState| DirtyPool {
            dirty_bytes: state.dirty_bytes + state.hold.bytes(),
            active_bytes,
            recent_free: state.recent_free,
            reserve: state.reserve,
            recent_peak,
            boost: state.boost.bytes(),
        };
        if let Some(age) = state.hold.committed_age(now) {
            if force || decommit_now(policy, pool_now(state), age) {
                self.settle_held(state, map);
            }
        }
        while !state.oldest.is_null() {
            let oldest = state.oldest;
            // SAFETY: the span lock is held; the age list holds heads of dirty free spans.
            let (units, freed_at) = unsafe { ((*oldest).units, (*oldest).role.free.freed_at) };
            let pool = pool_now(state);
            let age = now.saturating_sub(freed_at);
            if !force && !decommit_now(policy, pool, age) {
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
            // The pause the stretches measure starts at the span's free, or at the pool's last
            // hand-out if that came first: memory freed once the program's demand had paused (a
            // burst's bags, which reach the pool a pass after the program emptied them) waited
            // through the whole pause, not only the part after it arrived.
            let idle_from = match state.handout_at {
                0 => freed_at,
                handout_at => freed_at.min(handout_at),
            };
            if !force && age >= stretched {
                state
                    .stretch
                    .decommitted(decommit.delay_ns, now, idle_from, bytes);
            }
            if !force {
                if age >= policy.delay_ns {
                    state.boost.aged(bytes);
                } else {
                    state.boost.decommitted(now, decommit.delay_ns, bytes);
                }
            }
            if how == Purge::Quiet {
                // By age or past the cap: either way the program had paused.
                state
                    .quiet_stretch
                    .decommitted(decommit.delay_ns, now, idle_from, bytes);
            }
            // SAFETY: the span is free (no live object) and inside our region.
            unsafe { os::decommit(address as *mut u8, bytes) };
            self.uncharge(bytes);
            self.decommitted.fetch_add(bytes, Ordering::Relaxed);
            let (merged, merged_units) = self.insert_coalesced(state, map, first, units, 0, false);
            let merged = map.address_of(merged);
            self.settle_huge_pages(address, bytes, merged, merged_units << UNIT_SHIFT);
        }
    }

    /// Notes that `bytes` of decommitted memory are handed out again (the stretches'
    /// evidence); reads the clock only while a stretch watches. The span lock must be held.
    ///
    /// What a quiet purge returned counts as taken back after a pause
    /// ([`Stretch::retaken_after_pause`]): a program of bursts and pauses (a server between
    /// requests, a benchmark between rounds) then keeps its memory over pauses of that length;
    /// one that goes quiet for good gets it back after twice its longest such pause, at most
    /// [`MAX_STRETCHED_NS`].
    pub(super) fn note_retaken(state: &mut PoolState, bytes: usize) {
        let pool = state.stretch.watching();
        let quiet = state.quiet_stretch.watching();
        let cap = state.boost.watching();
        if !pool && !quiet && !cap {
            return;
        }
        let now = os::monotonic_ns();
        if cap {
            state.boost.retaken(now, bytes);
        }
        if pool {
            state.stretch.retaken(now, bytes);
        }
        if quiet {
            state.quiet_stretch.retaken_after_pause(now, bytes);
        }
    }
}

/// The most bytes a pool had in use recently: the peak of the current window and of the one
/// before it, each window at least one decommit delay long, so a peak counts for one to two
/// delays after the window it was reached in was first looked at. Kept under the span lock;
/// raised on every hand-out, rolled by the frees and purges that read it (a hand-out does not
/// read the clock).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PeakWindow {
    current: usize,
    previous: usize,
    since: u64,
}

impl PeakWindow {
    /// Notes that the pool has `active` bytes in use.
    pub(super) fn raise(&mut self, active: usize) {
        self.current = self.current.max(active);
    }

    /// The recent peak at `now`, rolling the window when it has lasted the delay (the pool has
    /// `active` bytes in use, where the new window starts).
    pub(super) fn recent(&mut self, active: usize, now: u64, delay_ns: u64) -> usize {
        if now.saturating_sub(self.since) >= delay_ns {
            self.previous = self.current;
            self.current = active;
            self.since = now;
        }
        self.current.max(self.previous).max(active)
    }
}

/// How far a pool stretches its decommit delay: the delay follows the pool's demand. (The
/// node heaps' sweep stretches its own the same way, per class: `node/sweep.rs`.)
///
/// A span decommitted because it waited the whole delay, whose memory the pool hands out
/// again soon after (a quarter of the bytes that went, within the delay), went too early: the
/// program only paused, longer than the delay, between two rounds of the same work (a request
/// loop that grows one buffer, a batch job's phases, a benchmark's repetitions). The pool then
/// doubles its delay until it covers twice that pause, at most [`MAX_STRETCHED_NS`]: the next
/// pause of that length keeps the memory committed instead of faulting it in again. The bytes
/// whose return proved the stretch are its **evidence**. A later round of decommits by age,
/// memory that did wait the whole stretched delay unused, halves the delay once it returns a
/// quarter of the evidence: the program stopped pausing, or pauses longer now. A smaller round
/// (a few bags the program's rounds no longer use, while the rest of the pool comes back after
/// every pause) halves the evidence instead, so such leftovers halve the delay only once they
/// add up, and a stretch learned from an old, bigger phase fades. A pool that never takes
/// decommitted memory back keeps the policy's delay.
///
/// The stretch never lets a pool hold more than the rule allows ([`decommit_now`]: the recent
/// peak of use beyond what is in use now, or a share of it), only for longer; and once the
/// program goes quiet the maintenance thread returns free memory after the policy's own delay
/// ([`Region::purge_quiet`]), or after the pool's second stretch, which learns from quiet
/// purges taken back after a pause ([`Self::retaken_after_pause`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stretch {
    /// The delay is the policy's doubled this many times (capped).
    shift: u32,
    /// The current round of decommits by age, and the newest time one of them had been freed
    /// at.
    round: Round,
    newest_freed: u64,
    /// The policy's delay, as of the round's decommits.
    base: u64,
    /// The bytes of the round whose return last stretched the delay, halved by each later
    /// round of decommits by age too small to halve the delay.
    evidence: usize,
    /// Whether the current round has halved the delay already.
    halved: bool,
}

/// The longest a stretched delay grows (the policy's delay, when that is longer).
pub(super) const MAX_STRETCHED_NS: u64 = 10_000_000_000;

/// A round of decommits went too early once 1/RETAKE_SHARE of its bytes is handed out again.
const RETAKE_SHARE: usize = 4;

/// A round of memory returned to the OS and the part of it handed out again soon after: what
/// the delay's stretch ([`Stretch`]) and the cap's boost ([`CapBoost`]) learn from. A round
/// proves its returns early once a quarter of its bytes comes back within a window after its
/// last return.
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    /// Bytes returned, bytes handed out again since, and when the last return happened.
    returned: usize,
    retaken: usize,
    last_at: u64,
}

impl Round {
    /// True while the round holds returned bytes that a retake may still prove early.
    fn watching(&self) -> bool {
        self.returned != 0
    }

    /// True when a return at `now` is more than `window` ns after the round's last one.
    fn is_over(&self, now: u64, window: u64) -> bool {
        now.saturating_sub(self.last_at) > window
    }

    /// Forgets the round's bytes (its last return's time stays, for [`Self::is_over`]).
    fn clear(&mut self) {
        self.returned = 0;
        self.retaken = 0;
    }

    /// Notes that `bytes` went back to the OS at `now`.
    fn returned(&mut self, now: u64, bytes: usize) {
        self.returned = self.returned.saturating_add(bytes);
        self.last_at = now;
    }

    /// Counts `bytes` handed out again at `now` when they come within `window` ns after the
    /// round's last return. Once they prove the round early, returns its bytes and clears it.
    fn retaken(&mut self, now: u64, bytes: usize, window: u64) -> Option<usize> {
        if !self.watching() || self.is_over(now, window) {
            return None;
        }
        self.retaken = self.retaken.saturating_add(bytes);
        if self.retaken.saturating_mul(RETAKE_SHARE) < self.returned {
            return None;
        }
        let returned = self.returned;
        self.clear();
        Some(returned)
    }
}

impl Stretch {
    /// The pool's delay, stretched from the policy's `base`.
    pub(crate) fn delay(&self, base: u64) -> u64 {
        if self.shift == 0 {
            return base;
        }
        base.saturating_mul(1 << self.shift)
            .min(MAX_STRETCHED_NS.max(base))
    }

    /// True while decommitted memory handed out again may still prove the round early (the
    /// caller reads the clock only then).
    pub(crate) fn watching(&self) -> bool {
        self.round.watching()
    }

    /// Notes that `bytes`, idle since `freed_at` (their free, or the last hand-out before it:
    /// where the pause the round may prove began), went back to the OS at `now` because they
    /// waited the whole delay.
    pub(crate) fn decommitted(&mut self, base: u64, now: u64, freed_at: u64, bytes: usize) {
        if self.round.is_over(now, self.delay(base)) {
            // A new round. The last one, if the program did not take it back, was a few
            // leftovers when it stayed short of halving the delay: it weakens the evidence.
            if self.round.watching() && !self.halved {
                self.evidence /= 2;
            }
            self.round.clear();
            self.newest_freed = 0;
            self.halved = false;
        }
        self.round.returned(now, bytes);
        self.base = base;
        self.newest_freed = self.newest_freed.max(freed_at);
        // Memory that waited the whole stretched delay unused, as much as a quarter of what
        // proved the stretch: the pauses it covered are over.
        if self.shift != 0
            && !self.halved
            && self.round.returned.saturating_mul(RETAKE_SHARE) >= self.evidence
        {
            self.shift -= 1;
            self.halved = true;
        }
    }

    /// Notes that `bytes` of decommitted memory were handed out again at `now`: evidence
    /// within the delay after the round's last decommit.
    pub(crate) fn retaken(&mut self, now: u64, bytes: usize) {
        self.retaken_within(now, bytes, self.delay(self.base));
    }

    /// [`Self::retaken`] for releases made because the program paused (a quiet pool's purge,
    /// the sweep of quiet bags): evidence within [`MAX_STRETCHED_NS`] after the round's last
    /// release. The pause was longer than the delay by definition, and a retake within the
    /// current delay would never see one ten times as long.
    pub(crate) fn retaken_after_pause(&mut self, now: u64, bytes: usize) {
        self.retaken_within(now, bytes, MAX_STRETCHED_NS);
    }

    /// Counts `bytes` handed out again at `now` when they come within `window` ns after the
    /// round's last release, and stretches the delay once they prove the round early.
    fn retaken_within(&mut self, now: u64, bytes: usize, window: u64) {
        let base = self.base;
        // A zero delay (memory goes back as soon as it is free) has nothing to stretch.
        if base == 0 {
            return;
        }
        let Some(returned) = self.round.retaken(now, bytes, window) else {
            return;
        };
        // The round went too early: stretch the delay over twice the pause it ended (at most
        // to the cap, which still keeps the memory over the program's shorter pauses).
        let pause = now.saturating_sub(self.newest_freed);
        let cap = MAX_STRETCHED_NS.max(base);
        while self.delay(base) < pause.saturating_mul(2) && self.delay(base) < cap {
            self.shift += 1;
        }
        self.evidence = returned;
        self.newest_freed = 0;
    }
}

/// Decommit policy, from the options (`NODALLOC_DECOMMIT_DELAY`, `NODALLOC_RETAIN`,
/// `NODALLOC_SPARES`).
#[derive(Clone, Copy, Debug)]
pub struct DecommitPolicy {
    /// How long a dirty span may wait before it is decommitted.
    pub delay_ns: u64,
    /// Dirty bytes per pool that stay committed whatever their age (see [`decommit_now`]).
    pub retain_bytes: usize,
    /// Bytes of empty bags each node's size classes may keep for their next bags, before
    /// the region sees them (`NodeHeaps::keeps_as_spare`).
    pub spare_bytes: usize,
}

/// Free committed (dirty) bytes beyond the retained budget may wait out the decommit delay only
/// while they are at most 1/DIRTY_SHARE of the bytes in use.
pub(super) const DIRTY_SHARE: usize = 64;

/// A boost of the cap on young dirty memory counts up to 1/BOOST_SHARE of the bytes in use.
pub(super) const BOOST_SHARE: usize = 8;

/// How far a busy pool raises its cap on young dirty memory ([`decommit_now`]): the cap
/// follows demand, as the delay does ([`Stretch`]).
///
/// The cap returns young memory at once, before its delay, when the pool holds more dirty
/// memory than a share of its use. A program that churns big blocks of varied sizes (buffers
/// of 5–25 MiB, twenty live, one replaced every couple of milliseconds) leaves dirty spans too
/// small for its next request: it takes clean memory, and the cap returns older dirty spans
/// that the requests after it fault in again (mimalloc-bench's `malloc-large` faulted in
/// 3.1 GiB that way). Memory the cap returned that the pool hands out again within the delay
/// (a quarter of a round's bytes) proves the cap too tight for the program's fragmentation:
/// the boost grows by the round's bytes. Memory that waits the whole delay unused (decommitted
/// by age, or by the maintenance thread once the program goes quiet) shrinks it by as much, so
/// the boost only ever keeps memory the program reuses within the delay, and never changes
/// what a quiet program keeps.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CapBoost {
    /// Extra young dirty bytes the cap allows.
    boost: usize,
    /// The current round of the cap's returns, and the delay as of its last one (the window
    /// of the evidence).
    round: Round,
    window: u64,
}

impl CapBoost {
    /// The extra young dirty bytes the cap allows.
    pub(crate) fn bytes(&self) -> usize {
        self.boost
    }

    /// True while memory handed out again may still prove the cap too tight.
    pub(crate) fn watching(&self) -> bool {
        self.round.watching()
    }

    /// Notes that the cap returned `bytes` at `now`, before their delay (`delay_ns`) was out.
    pub(crate) fn decommitted(&mut self, now: u64, delay_ns: u64, bytes: usize) {
        if self.round.is_over(now, self.window) {
            self.round.clear();
        }
        self.round.returned(now, bytes);
        self.window = delay_ns;
    }

    /// Notes that `bytes` of decommitted memory were handed out again at `now`; a quarter of
    /// the round, within the delay after its last return, grows the boost by the round.
    pub(crate) fn retaken(&mut self, now: u64, bytes: usize) {
        if let Some(returned) = self.round.retaken(now, bytes, self.window) {
            self.boost = self.boost.saturating_add(returned);
        }
    }

    /// Notes that `bytes` waited the whole delay unused and went back.
    pub(crate) fn aged(&mut self, bytes: usize) {
        self.boost = self.boost.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MIB: usize = 1 << 20;

    /// Each row: retained budget, dirty, active and recent-free bytes, the recent peak of the
    /// bytes in use, the span's age, and whether it goes now.
    #[test]
    pub(super) fn decommit_decision_table() {
        let policy = |retain_bytes| DecommitPolicy {
            delay_ns: 10 * MS,
            retain_bytes,
            spare_bytes: 0,
        };
        /// retain, dirty, active, recent free, recent peak, age, now?, why
        type Row = (usize, usize, usize, usize, usize, u64, bool, &'static str);
        #[rustfmt::skip]
        let rows: &[Row] = &[
            // retain, dirty,   active,     recent,  peak,       age,     now?   why (reserve 0)
            (0,        MIB,     1024 * MIB, 0,       0,          0,       false, "young, within 1/64 of use"),
            (0,        MIB,     1024 * MIB, 0,       0,          10 * MS, true,  "waited the delay"),
            (0,        MIB,     1024 * MIB, 0,       0,          9 * MS,  false, "one ms short of the delay"),
            (0,        17 * MIB, 1024 * MIB, 0,      0,          0,       true,  "above 1/64 of use: at once"),
            (0,        16 * MIB, 1024 * MIB, 0,      0,          0,       false, "exactly 1/64 of use waits"),
            (0,        20 * MIB, 1024 * MIB, 4 * MIB, 0,         0,       false, "twice a recent 4 MiB free waits"),
            (0,        25 * MIB, 1024 * MIB, 4 * MIB, 0,         0,       true,  "past the share and the recent free"),
            (32 * MIB, 17 * MIB, 1024 * MIB, 0,      0,          10 * MS, false, "within the retained budget, even old"),
            (32 * MIB, 33 * MIB, 0,         0,       0,          0,       true,  "past the budget with nothing in use"),
            (0,        1,       0,          0,       0,          0,       true,  "an emptied heap gives back its last byte"),
            (0,        0,       0,          0,       0,          u64::MAX, false, "nothing dirty"),
            (0,        64 * MIB, 0,         0,       64 * MIB,   0,       false, "a heap emptied since its recent peak waits"),
            (0,        64 * MIB, 0,         0,       64 * MIB,   10 * MS, true,  "and goes once it waited the delay"),
            (0,        65 * MIB, 0,         0,       64 * MIB,   0,       true,  "never more than the peak held"),
            (0,        40 * MIB, 24 * MIB,  0,       64 * MIB,   9 * MS,  false, "use fell by 40 MiB from its peak: 40 wait"),
            (0,        41 * MIB, 24 * MIB,  0,       64 * MIB,   0,       true,  "41 do not"),
            (0,        17 * MIB, 1024 * MIB, 0,      1000 * MIB, 0,       true,  "a peak below use adds nothing"),
        ];
        for &(retain, dirty_bytes, active_bytes, recent_free, recent_peak, age, expected, why) in
            rows
        {
            let pool = DirtyPool {
                dirty_bytes,
                active_bytes,
                recent_free,
                reserve: 0,
                recent_peak,
                boost: 0,
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
                recent_peak: 64 * MIB,
                boost: 0,
            };
            decommit_now(policy(0), pool, age)
        };
        assert!(!prepared(0), "a reserve of prepared chunks is kept");
        assert!(prepared(10 * MS), "an unused one goes after the delay");
        // A boost raises the cap by what the pool earned, up to an eighth of what is in use.
        let boosted = |dirty_bytes, boost| {
            let pool = DirtyPool {
                dirty_bytes,
                active_bytes: 1024 * MIB,
                recent_free: 0,
                reserve: 0,
                recent_peak: 0,
                boost,
            };
            decommit_now(policy(0), pool, 0)
        };
        assert!(
            !boosted(116 * MIB, 100 * MIB),
            "a 100 MiB boost keeps 100 MiB more"
        );
        assert!(boosted(117 * MIB, 100 * MIB), "and no more");
        assert!(
            !boosted(144 * MIB, 600 * MIB),
            "an eighth of what is in use"
        );
        assert!(boosted(145 * MIB, 600 * MIB), "at most");
    }

    /// A round is proved early by a quarter of its bytes handed out again within the window
    /// after its last return, and gives its bytes once; retakes after the window, or before
    /// any return, count for nothing.
    #[test]
    fn a_round_is_proved_early_by_a_quarter_of_its_bytes_within_its_window() {
        const S: u64 = 1_000_000_000;
        let mut round = Round::default();
        assert_eq!(
            round.retaken(S, MIB, 100 * MS),
            None,
            "nothing returned yet"
        );
        round.returned(S, 4 * MIB);
        round.returned(S + 50 * MS, 4 * MIB);
        assert!(round.watching());
        // The window runs from the last return.
        assert!(!round.is_over(S + 150 * MS, 100 * MS));
        assert!(round.is_over(S + 151 * MS, 100 * MS));
        assert_eq!(round.retaken(S + 60 * MS, 2 * MIB - 1, 100 * MS), None);
        assert_eq!(
            round.retaken(S + 70 * MS, 1, 100 * MS),
            Some(8 * MIB),
            "a quarter of the round's eight MiB"
        );
        assert!(!round.watching(), "a proven round starts again");
        assert_eq!(round.retaken(S + 80 * MS, 8 * MIB, 100 * MS), None);
        // Retakes after the window do not count.
        round.returned(2 * S, 4 * MIB);
        assert_eq!(round.retaken(2 * S + 101 * MS, 4 * MIB, 100 * MS), None);
        assert!(round.watching());
        round.clear();
        assert!(!round.watching());
    }

    /// The cap's boost grows by a round of the cap's returns once a quarter of it is handed out
    /// again within the delay, and shrinks by what waits the whole delay unused.
    #[test]
    fn the_cap_grows_by_what_it_returned_and_the_pool_took_back() {
        const S: u64 = 1_000_000_000;
        let delay = 100 * MS;
        let mut boost = CapBoost::default();
        assert!(!boost.watching());
        boost.retaken(S, 64 * MIB);
        assert_eq!(boost.bytes(), 0, "nothing returned, nothing proved");
        boost.decommitted(S, delay, 8 * MIB);
        assert!(boost.watching());
        boost.retaken(S + MS, 2 * MIB - 1);
        assert_eq!(boost.bytes(), 0, "less than a quarter came back");
        boost.retaken(S + 2 * MS, 1);
        assert_eq!(boost.bytes(), 8 * MIB, "a quarter: the round's 8 MiB");
        assert!(!boost.watching(), "the round is judged");
        // Memory taken back after the delay proves nothing.
        boost.decommitted(2 * S, delay, 4 * MIB);
        boost.retaken(2 * S + 200 * MS, 4 * MIB);
        assert_eq!(boost.bytes(), 8 * MIB);
        // A round that starts after the delay forgets the one before it.
        boost.decommitted(3 * S, delay, 4 * MIB);
        boost.retaken(3 * S + MS, MIB);
        assert_eq!(boost.bytes(), 12 * MIB, "the new round alone: 1 MiB of 4");
        // Returns within the delay add up to one round.
        boost.decommitted(4 * S, delay, 4 * MIB);
        boost.decommitted(4 * S + 50 * MS, delay, 4 * MIB);
        boost.retaken(4 * S + 60 * MS, MIB);
        assert_eq!(boost.bytes(), 12 * MIB, "1 MiB of 8");
        boost.retaken(4 * S + 70 * MS, MIB);
        assert_eq!(boost.bytes(), 20 * MIB);
        // Memory that waited the whole delay unused takes the boost down by as much.
        boost.aged(5 * MIB);
        assert_eq!(boost.bytes(), 15 * MIB);
        boost.aged(100 * MIB);
        assert_eq!(boost.bytes(), 0);
    }

    /// The stretch: a round of decommits by age that the pool takes back within the delay
    /// stretches the delay over twice the pause; a round that waited the stretched delay
    /// unused halves it once it returns a quarter of what proved the stretch, and smaller
    /// rounds halve that evidence; nothing else moves it.
    #[test]
    fn the_delay_stretches_over_pauses_whose_memory_comes_back() {
        const S: u64 = 1_000_000_000;
        let base = 100 * MS;
        let mut stretch = Stretch::default();
        assert_eq!(stretch.delay(base), base);
        assert!(!stretch.watching(), "nothing decommitted yet");
        // 16 MiB freed at 1 s, decommitted by age at 2 s (the program paused a second), then
        // taken back at once: a quarter is not yet the evidence, a quarter more than that is.
        stretch.decommitted(base, 2 * S, S, 16 * MIB);
        assert!(stretch.watching());
        stretch.retaken(2 * S + MS, 4 * MIB - 1);
        assert_eq!(stretch.delay(base), base, "less than a quarter came back");
        stretch.retaken(2 * S + 2 * MS, 1);
        assert_eq!(
            stretch.delay(base),
            3200 * MS,
            "the smallest doubling over twice the 1 s pause"
        );
        assert!(!stretch.watching(), "the round is judged");
        // The next pause of a second keeps the memory; a round that then waits the whole
        // stretched delay unused halves it.
        stretch.decommitted(base, 10 * S, 6 * S, 16 * MIB);
        assert_eq!(stretch.delay(base), 1600 * MS);
        // Later decommits of the same round do not halve it again.
        stretch.decommitted(base, 10 * S + MS, 6 * S, MIB);
        assert_eq!(stretch.delay(base), 1600 * MS);
        // Memory taken back after the delay is no evidence (the program was away longer).
        stretch.retaken(10 * S + 1700 * MS, 32 * MIB);
        assert_eq!(stretch.delay(base), 1600 * MS);

        // Leftovers: the program takes its 16 MiB back after every 1 s pause, and a few bags
        // it no longer uses wait the stretched delay, 1 MiB a round.
        let mut stretch = Stretch::default();
        stretch.decommitted(base, 2 * S, S, 16 * MIB);
        stretch.retaken(2 * S + MS, 16 * MIB);
        assert_eq!(stretch.delay(base), 3200 * MS);
        stretch.decommitted(base, 10 * S, 6 * S, MIB);
        assert_eq!(
            stretch.delay(base),
            3200 * MS,
            "1 MiB is not a quarter of 16"
        );
        // The next round finds the evidence halved to 8 MiB: still short.
        stretch.decommitted(base, 20 * S, 16 * S, MIB);
        assert_eq!(
            stretch.delay(base),
            3200 * MS,
            "1 MiB is not a quarter of 8"
        );
        // At 4 MiB of evidence, a 1 MiB round halves the delay, once a round.
        stretch.decommitted(base, 30 * S, 26 * S, MIB);
        assert_eq!(
            stretch.delay(base),
            1600 * MS,
            "leftovers that add up halve it"
        );
        stretch.decommitted(base, 30 * S + MS, 26 * S, 4 * MIB);
        assert_eq!(stretch.delay(base), 1600 * MS, "once a round");

        // A pause beyond the longest delay stretches it to the cap, for the shorter pauses.
        let mut stretch = Stretch::default();
        stretch.decommitted(base, 61 * S, S, MIB);
        stretch.retaken(61 * S, MIB);
        assert_eq!(stretch.delay(base), MAX_STRETCHED_NS);
        // A 3 s pause stretches the delay to 6.4 s.
        let mut stretch = Stretch::default();
        stretch.decommitted(base, 80 * S, 77 * S, MIB);
        stretch.retaken(80 * S, MIB);
        assert_eq!(stretch.delay(base), 6400 * MS);
        // A pause shorter than the delay was not the delay's doing: no stretch.
        let mut stretch = Stretch::default();
        stretch.decommitted(base, S, S - 50 * MS, MIB);
        stretch.retaken(S, MIB);
        assert_eq!(stretch.delay(base), base);
        // A zero delay has nothing to stretch (nor must the doubling spin on it).
        let mut stretch = Stretch::default();
        stretch.decommitted(0, 2 * S, S, MIB);
        stretch.retaken_after_pause(2 * S, MIB);
        assert_eq!(stretch.delay(0), 0);
        // A policy delay beyond the cap is never shortened.
        let mut stretch = Stretch::default();
        stretch.decommitted(20 * S, 40 * S, 15 * S, MIB);
        stretch.retaken(40 * S, MIB);
        assert_eq!(stretch.delay(20 * S), 20 * S);
    }

    /// A peak counts for the window it was reached in and the next one, then falls to what is in
    /// use.
    #[test]
    fn a_peak_counts_for_one_to_two_delays() {
        let delay = 10 * MS;
        let mut peak = PeakWindow::default();
        // Raised before the first look (which starts a window at once): still counted.
        peak.raise(64 * MIB);
        assert_eq!(peak.recent(8 * MIB, 100 * MS, delay), 64 * MIB);
        assert_eq!(
            peak.recent(8 * MIB, 115 * MS, delay),
            8 * MIB,
            "two windows on"
        );
        let mut peak = PeakWindow::default();
        assert_eq!(peak.recent(0, 1, delay), 0, "nothing in use yet");
        peak.raise(64 * MIB);
        assert_eq!(peak.recent(64 * MIB, 2 * MS, delay), 64 * MIB);
        // Use falls within the window: the peak holds.
        assert_eq!(peak.recent(8 * MIB, 5 * MS, delay), 64 * MIB);
        // The next window: still the peak of the window before.
        assert_eq!(peak.recent(8 * MIB, 12 * MS, delay), 64 * MIB);
        peak.raise(16 * MIB);
        assert_eq!(peak.recent(8 * MIB, 19 * MS, delay), 64 * MIB);
        // The window after that: only the previous window's peak (16 MiB) counts.
        assert_eq!(peak.recent(8 * MIB, 23 * MS, delay), 16 * MIB);
        // A look a window later: nothing of the 64 MiB peak is left.
        assert_eq!(
            peak.recent(4 * MIB, 35 * MS, delay),
            8 * MIB,
            "the window's start"
        );
        assert_eq!(peak.recent(4 * MIB, 46 * MS, delay), 4 * MIB);
        // What is in use counts even if nothing raised the window.
        assert_eq!(peak.recent(32 * MIB, 47 * MS, delay), 32 * MIB);
    }
}
