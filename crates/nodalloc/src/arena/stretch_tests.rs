//! The decommit delay that follows demand (`region/decommit.rs`, `Stretch`) on a real pool: a
//! pool that takes decommitted memory back after a pause keeps it over the next pause, until
//! the maintenance thread's pass finds it quiet.

use super::tests::test_arena_policy;
use super::*;
use std::thread::sleep;
use std::time::{Duration, Instant};

#[test]
fn a_pool_keeps_memory_over_pauses_it_came_back_after_until_it_goes_quiet() {
    const DELAY_NS: u64 = 20_000_000;
    // A 100 ms pause: the stretched delay covers twice that, 20 ms doubled four times.
    const PAUSE: Duration = Duration::from_millis(100);
    const STRETCHED_NS: u128 = 320_000_000;
    // 16 MiB: past the hold, which keeps spans up to 2 MiB out of the lists.
    const UNITS: usize = 512;
    const BYTES: usize = UNITS * UNIT;
    let decommit = DecommitPolicy {
        delay_ns: DELAY_NS,
        retain_bytes: 0,
        spare_bytes: 0,
    };
    let arena = test_arena_policy(1, 256 << 20, decommit, false, false, ThpChoice::Auto);
    let region = arena.pool(0, Pool::Sparse);
    let decommitted = || region.decommitted.load(Ordering::Relaxed);
    // One round of the program's work: a 16 MiB buffer written whole and freed.
    let round = || {
        let (span, _) = arena.alloc_span(0, UNITS, 1, SpanUse::Large).unwrap();
        // SAFETY: a span we were just handed, the size we asked for.
        unsafe { (span as *mut u8).write_bytes(7, BYTES) };
        // SAFETY: handed out above, nothing live in it.
        unsafe { arena.free_span(span, UNITS) };
        Instant::now()
    };

    round();
    sleep(PAUSE);
    // The first purge after the pause finds the buffer waited the delay: it goes.
    arena.purge(false);
    assert_eq!(decommitted(), BYTES, "the first pause returns the buffer");
    // The next round takes it back at once: the decommit came too early.
    let freed = round();
    sleep(PAUSE);
    arena.purge(false);
    if freed.elapsed().as_nanos() < STRETCHED_NS {
        assert_eq!(decommitted(), BYTES, "the second pause keeps the buffer");
        assert_eq!(region.dirty_bytes(), BYTES);
    }
    // The maintenance thread's pass: the first saw the round's hand-out, the next finds the
    // pool quiet and returns what waited the policy's own delay.
    region.purge_quiet(arena.map(), decommit);
    let before_quiet = decommitted();
    region.purge_quiet(arena.map(), decommit);
    assert_eq!(decommitted(), 2 * BYTES, "a quiet pool returns the buffer");
    assert!(before_quiet <= 2 * BYTES);
    assert_eq!(region.dirty_bytes(), 0);
}
