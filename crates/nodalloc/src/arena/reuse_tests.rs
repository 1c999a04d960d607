//! How a region reuses and returns its free spans: dirty spans before clean ones, the best fit
//! of a bucket, a large request completed from clean neighbours, the cap on young dirty memory
//! and its boost, the budget, and the delay under the recent peak of use.

use super::tests::{free_unheld, test_arena, test_arena_policy, xorshift};
use super::*;

/// A one-node test arena of `region_bytes` whose pools decommit free memory after `delay_ns`,
/// retaining none and keeping no spares.
fn arena_with_delay(region_bytes: u64, delay_ns: u64) -> &'static Arena {
    let policy = DecommitPolicy {
        delay_ns,
        retain_bytes: 0,
        spare_bytes: 0,
    };
    test_arena_policy(1, region_bytes, policy, false, false, ThpChoice::Auto)
}

#[test]
fn an_exhausted_region_merges_dirty_and_clean_free_spans_before_failing() {
    let arena = test_arena(1, 64 << 20, usize::MAX);
    // Fill the whole region (64 MiB = 2048 units: the shared pools, then the owned pool they
    // spill into) with 64-unit spans.
    let spans: Vec<usize> = (0..32)
        .map(|_| arena.alloc_span(0, 64, 1, SpanUse::Large).unwrap().0)
        .collect();
    assert!(
        arena.alloc_span(0, 1, 1, SpanUse::Large).is_none(),
        "region should be full"
    );
    let mut sorted = spans.clone();
    sorted.sort();
    // Two neighbours freed in different states: one decommitted (clean), one dirty. They
    // do not coalesce, so neither piece alone holds 128 units.
    // SAFETY: the spans were handed out above and hold nothing.
    unsafe { arena.free_span(sorted[10], 64) };
    arena.purge(true);
    // SAFETY: as above.
    unsafe { arena.free_span(sorted[11], 64) };
    let (address, _) = arena
        .alloc_span(0, 128, 1, SpanUse::Large)
        .expect("the two free neighbours together must serve 128 units");
    assert_eq!(address, sorted[10]);
}

/// A request takes a committed (dirty) span that fits before a decommitted (clean) one, however
/// many clean spans a purge has just listed in the same bucket: the two states have their own
/// bucket lists. With one list, the spans the purge re-inserted at its head hid the dirty span
/// from the search (which looks at 16 a bucket), and the request faulted in fresh pages.
#[test]
fn a_request_reuses_a_dirty_span_behind_many_clean_ones_of_its_size() {
    const DELAY_NS: u64 = 100_000_000;
    let arena = arena_with_delay(64 << 20, DELAY_NS);
    let region = arena.pool(0, Pool::Sparse);
    // One-unit spans, every other one freed, so no two free spans are neighbours.
    const FREED: usize = 24;
    let mut spans: Vec<usize> = (0..2 * FREED + 3)
        .map(|_| arena.alloc_span(0, 1, 1, SpanUse::Large).unwrap().0)
        .collect();
    spans.sort();
    for index in (1..2 * FREED).step_by(2) {
        // SAFETY: each span is handed out once above and freed once here; it holds nothing.
        unsafe { free_unheld(arena, spans[index], 1) };
    }
    std::thread::sleep(std::time::Duration::from_nanos(2 * DELAY_NS));
    // A young dirty span, then a purge: the old ones go back to the OS and are listed again,
    // clean, in the same bucket; the young one waits out the delay.
    let dirty = spans[2 * FREED + 1];
    // SAFETY: as above.
    unsafe { free_unheld(arena, dirty, 1) };
    arena.purge(false);
    assert_eq!(
        region.dirty_bytes(),
        UNIT,
        "only the young span is still committed"
    );
    let (address, _) = arena.alloc_span(0, 1, 1, SpanUse::Large).unwrap();
    assert_eq!(address, dirty, "the committed span is reused");
    assert_eq!(region.dirty_bytes(), 0);
}

/// A busy pool that replaces big blocks of varied sizes (mimalloc-bench's `malloc-large` in
/// miniature: twenty live, each step frees one and asks for another of 2–11 MiB) raises its cap
/// on young dirty memory once what the cap returned comes back within the delay: in the second
/// half of the run little goes back to the OS to be faulted in again, and the dirty memory it
/// keeps stays within the boost's share of what is in use. With the cap alone, a twelfth of
/// what the second half hands out went back first; with the boost, a thirtieth (a twentieth
/// is allowed).
#[test]
fn a_busy_pool_keeps_the_young_memory_its_cap_returned_and_took_back() {
    const DELAY_NS: u64 = 60_000_000_000;
    let arena = arena_with_delay(1 << 30, DELAY_NS);
    let region = arena.pool(0, Pool::Sparse);
    let decommitted = || region.decommitted.load(Ordering::Relaxed);
    // A fixed sequence of sizes and slots (an xorshift generator), above the hold's sizes.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |bound: usize| {
        xorshift(&mut seed);
        (seed % bound as u64) as usize
    };
    const LIVE: usize = 20;
    const STEPS: usize = 1200;
    const MIN_UNITS: usize = 64;
    const MAX_UNITS: usize = 352;
    let mut live: Vec<(usize, usize)> = (0..LIVE)
        .map(|_| {
            let units = MIN_UNITS + next(MAX_UNITS - MIN_UNITS);
            (
                arena.alloc_span(0, units, 1, SpanUse::Large).unwrap().0,
                units,
            )
        })
        .collect();
    let (mut handed_out, mut returned_before) = (0, 0);
    let mut peak = region.active.load(Ordering::Relaxed);
    for step in 0..STEPS {
        if step == STEPS / 2 {
            returned_before = decommitted();
        }
        let slot = next(LIVE);
        let (address, units) = live[slot];
        // SAFETY: each span is handed out once and freed once here; it holds nothing.
        unsafe { arena.free_span(address, units) };
        // The rule's cap as the free's purge saw it (a share of use and twice the biggest free,
        // or the fall from the peak, which the run's delay covers whole), plus the boost: an
        // eighth of what is in use. The hand-out after it only takes dirty memory away.
        let active = region.active.load(Ordering::Relaxed);
        let cap = (active / 64 + 2 * MAX_UNITS * UNIT).max(peak - active) + active / 8;
        let units = MIN_UNITS + next(MAX_UNITS - MIN_UNITS);
        live[slot] = (
            arena.alloc_span(0, units, 1, SpanUse::Large).unwrap().0,
            units,
        );
        peak = peak.max(region.active.load(Ordering::Relaxed));
        if step >= STEPS / 2 {
            handed_out += units * UNIT;
        }
        assert!(
            region.dirty_bytes() <= cap,
            "step {step}: {} dirty bytes past the boosted cap of {cap}",
            region.dirty_bytes()
        );
    }
    let returned = decommitted() - returned_before;
    assert!(
        returned * 20 < handed_out,
        "the second half returned {returned} of the {handed_out} bytes it handed out"
    );
    for (address, units) in live {
        // SAFETY: as above.
        unsafe { arena.free_span(address, units) };
    }
    arena.purge(true);
    assert_eq!(region.committed.load(Ordering::Relaxed), 0);
}

/// A large request takes the smallest dirty span of its bucket that fits, whatever the order
/// of the bucket's list: the bigger span stays whole for a bigger request.
#[test]
fn a_large_request_takes_the_smallest_dirty_span_of_its_bucket_that_fits() {
    const SIZES: [usize; 2] = [120, 80];
    for order in [[0, 1], [1, 0]] {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        // Two spans of one bucket (65–127 units), each with a live fence after it so the two
        // never merge.
        let spans: Vec<usize> = SIZES
            .iter()
            .map(|&units| {
                let span = arena.alloc_span(0, units, 1, SpanUse::Large).unwrap().0;
                arena.alloc_span(0, 1, 1, SpanUse::Large).unwrap();
                span
            })
            .collect();
        for index in order {
            // SAFETY: each span is handed out once above and freed once here; it holds nothing.
            unsafe { free_unheld(arena, spans[index], SIZES[index]) };
        }
        let (taken, _) = arena.alloc_span(0, 72, 1, SpanUse::Large).unwrap();
        assert_eq!(
            taken, spans[1],
            "freed in the order {order:?}: the 80-unit span, not the 120-unit one"
        );
    }
}

/// A large request that no dirty span fits is served over a dirty span and its clean
/// neighbours: the dirty memory is reused as it is and only the clean part is committed anew.
#[test]
fn a_large_request_reuses_a_dirty_span_and_takes_what_it_lacks_from_clean_neighbours() {
    let arena = test_arena(1, 64 << 20, usize::MAX);
    let region = arena.pool(0, Pool::Sparse);
    let committed = || region.committed.load(Ordering::Relaxed);
    // Five neighbouring 32-unit spans, each filled with its index + 1.
    let mut spans: Vec<usize> = (0..5)
        .map(|_| arena.alloc_span(0, 32, 1, SpanUse::Large).unwrap().0)
        .collect();
    spans.sort();
    for (index, &span) in spans.iter().enumerate() {
        assert_eq!(span, spans[0] + index * 32 * UNIT, "neighbours");
        // SAFETY: touching memory we were handed.
        unsafe { (span as *mut u8).write_bytes(index as u8 + 1, 32 * UNIT) };
    }
    let free = |index: usize| {
        // SAFETY: each span is handed out once above and freed once here; it holds nothing.
        unsafe { free_unheld(arena, spans[index], 32) };
    };
    // Clean after: spans 1 and 2 decommitted, then span 0 freed dirty before them.
    free(1);
    free(2);
    arena.purge(true);
    free(0);
    assert_eq!(region.dirty_bytes(), 32 * UNIT);
    let before = committed();
    let (mixed, _) = arena.alloc_span(0, 48, 1, SpanUse::Large).unwrap();
    assert_eq!(mixed, spans[0], "the request covers the dirty span");
    assert_eq!(region.dirty_bytes(), 0, "the dirty span is used up");
    assert_eq!(
        committed() - before,
        16 * UNIT,
        "only the clean part is charged"
    );
    // SAFETY: reading the span we were just handed, inside its 48 units.
    unsafe {
        assert_eq!(
            *((mixed + 64) as *const u8),
            1,
            "the dirty part is as it was"
        );
        assert_eq!(
            *((mixed + 40 * UNIT) as *const u8),
            0,
            "the clean part reads zero"
        );
    }
    // Clean before: span 3 freed dirty after a clean span (spans 0 to 2, once the request is
    // freed and decommitted).
    // SAFETY: handed out above, holds nothing, freed once.
    unsafe { free_unheld(arena, mixed, 48) };
    arena.purge(true);
    free(3);
    let before = committed();
    let (mixed, _) = arena.alloc_span(0, 40, 1, SpanUse::Large).unwrap();
    assert_eq!(
        mixed,
        spans[3] - 8 * UNIT,
        "the lacking 8 units come from before"
    );
    assert_eq!(committed() - before, 8 * UNIT);
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            *((spans[3] + 64) as *const u8),
            4,
            "the dirty part is as it was"
        );
        assert_eq!(*(mixed as *const u8), 0, "the clean part reads zero");
    }
    // Everything handed back and decommitted: the accounts return to span 4 alone.
    // SAFETY: handed out above, freed once.
    unsafe { free_unheld(arena, mixed, 40) };
    free(4);
    arena.purge(true);
    assert_eq!(committed(), 0);
    assert_eq!(region.active.load(Ordering::Relaxed), 0);
}

#[test]
fn aligned_spans_are_aligned() {
    let arena = test_arena(1, 64 << 20, usize::MAX);
    for align_units in [1, 2, 4, 32] {
        let (address, _) = arena.alloc_span(0, 1, align_units, SpanUse::Large).unwrap();
        assert_eq!(address % (align_units * UNIT), 0);
    }
}

#[test]
fn a_full_region_spills_to_the_nearest_node() {
    let arena = test_arena(4, 64 << 20, usize::MAX);
    // Fill node 1's region (64 MiB = 2048 units, the owned pool last) with 2 MiB spans.
    for _ in 0..32 {
        assert_eq!(arena.alloc_span(1, 64, 1, SpanUse::Large).unwrap().1, 1);
    }
    let (_, from) = arena.alloc_span(1, 64, 1, SpanUse::Large).unwrap();
    assert!(
        from == 0 || from == 2,
        "spilled to node {from}, not a nearest one"
    );
    assert_eq!(arena.steals(1), 1);
}

#[test]
fn free_memory_past_the_budget_is_decommitted() {
    let arena = test_arena(1, 64 << 20, 1 << 20);
    let region = arena.pool(0, Pool::Sparse);
    let spans: Vec<usize> = (0..8)
        .map(|_| arena.alloc_span(0, 32, 1, SpanUse::Large).unwrap().0)
        .collect();
    for &span in &spans {
        // SAFETY: touching memory we were handed.
        unsafe { (span as *mut u8).write_bytes(1, 32 * UNIT) };
    }
    let before = region.committed.load(Ordering::Relaxed);
    assert_eq!(before, 8 * 32 * UNIT);
    for &span in &spans {
        // SAFETY: each span was handed out above and holds nothing live.
        unsafe { arena.free_span(span, 32) };
    }
    // Delay 0: everything beyond the 1 MiB budget goes back at once.
    assert!(region.dirty_bytes() <= 1 << 20);
    assert!(region.committed.load(Ordering::Relaxed) <= 1 << 20);
    assert!(region.decommitted.load(Ordering::Relaxed) >= before - (1 << 20));
    arena.purge(true);
    assert_eq!(region.committed.load(Ordering::Relaxed), 0);
    assert_eq!(region.active.load(Ordering::Relaxed), 0);
    // Decommitted memory reads as zero when handed out again.
    let (again, _) = arena.alloc_span(0, 32, 1, SpanUse::Large).unwrap();
    // SAFETY: reading memory we were handed.
    assert_eq!(unsafe { *(again as *const u8) }, 0);
}

/// A heap that falls empty and fills again within the decommit delay keeps its memory committed
/// (no fault on the way back up), never more than it held at its peak, and gives it back once
/// it has waited the delay.
#[test]
fn memory_freed_below_the_recent_peak_waits_out_the_delay() {
    const DELAY_NS: u64 = 200_000_000;
    let decommit = DecommitPolicy {
        delay_ns: DELAY_NS,
        retain_bytes: 1 << 20,
        spare_bytes: 0,
    };
    let arena = test_arena_policy(1, 64 << 20, decommit, false, false, ThpChoice::Auto);
    let region = arena.pool(0, Pool::Sparse);
    // Spans too big for the hold (which keeps the span freed last out of reuse).
    const UNITS: usize = region::HOLD_MAX_UNITS + 8;
    let alloc_all = || -> Vec<usize> {
        (0..8)
            .map(|_| {
                let (span, _) = arena.alloc_span(0, UNITS, 1, SpanUse::Large).unwrap();
                // SAFETY: a span we were just handed, the size we asked for.
                unsafe { (span as *mut u8).write_bytes(1, UNITS * UNIT) };
                span
            })
            .collect()
    };
    let first = alloc_all();
    let peak = region.committed.load(Ordering::Relaxed);
    assert_eq!(peak, 8 * UNITS * UNIT);
    let started = std::time::Instant::now();
    for &span in &first {
        // SAFETY: each span was handed out above and holds nothing live.
        unsafe { arena.free_span(span, UNITS) };
    }
    // Under the old rule everything past 1 MiB went back at once (dirty bytes above 1/64 of
    // nothing in use); below the recent peak it waits.
    if started.elapsed().as_nanos() < u128::from(DELAY_NS) {
        assert_eq!(region.committed.load(Ordering::Relaxed), peak);
        assert_eq!(region.decommitted.load(Ordering::Relaxed), 0);
    }
    // Filled again: the same memory, nothing new committed, nothing faulted back.
    let second = alloc_all();
    if started.elapsed().as_nanos() < u128::from(DELAY_NS) {
        assert_eq!(region.committed.load(Ordering::Relaxed), peak);
        assert_eq!(region.decommitted.load(Ordering::Relaxed), 0);
    }
    for &span in &second {
        // SAFETY: as above.
        unsafe { arena.free_span(span, UNITS) };
    }
    // Past the delay, a purge (a thread's upkeep, the maintenance thread) gives back all but the
    // retained budget.
    std::thread::sleep(std::time::Duration::from_nanos(DELAY_NS + 10_000_000));
    arena.purge(false);
    assert!(region.committed.load(Ordering::Relaxed) <= 1 << 20);
    assert!(region.decommitted.load(Ordering::Relaxed) >= peak - (1 << 20));
}
