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
mod tests;
