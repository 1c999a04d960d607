//! Tests of the decommit rules (`decommit.rs`): the decision table, the rounds of returned and
//! retaken bytes, the cap's boost, the delay's stretch over pauses, and the recent peak's window.

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
    for &(retain, dirty_bytes, active_bytes, recent_free, recent_peak, age, expected, why) in rows {
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
