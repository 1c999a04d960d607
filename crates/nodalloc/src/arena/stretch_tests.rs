//! The decommit delay that follows demand (`region/decommit.rs`, `Stretch`) on a real pool: a
//! pool that takes decommitted memory back after a pause keeps it over the next pause, until
//! the maintenance thread's pass finds it quiet, or, when what quiet passes returned came back
//! after the pause, until it stays quiet for twice that pause.

use super::tests::test_arena_policy;
use super::*;
use std::thread::sleep;
use std::time::{Duration, Instant};

const DELAY_NS: u64 = 20_000_000;
/// A 100 ms pause: the stretched delay covers twice that, 20 ms doubled four times.
const PAUSE: Duration = Duration::from_millis(100);
const STRETCHED_NS: u128 = 320_000_000;
/// 16 MiB: past the hold, which keeps spans up to 2 MiB out of the lists.
const UNITS: usize = 512;
const BYTES: usize = UNITS * UNIT;
const POLICY: DecommitPolicy = DecommitPolicy {
    delay_ns: DELAY_NS,
    retain_bytes: 0,
    spare_bytes: 0,
};

/// An arena whose node 0 has the tests' policy.
fn arena() -> &'static Arena {
    test_arena_policy(1, 256 << 20, POLICY, false, false, ThpChoice::Auto)
}

/// One round of the program's work: a 16 MiB buffer written whole and freed; when it was freed.
fn round(arena: &Arena) -> Instant {
    let (span, _) = arena.alloc_span(0, UNITS, 1, SpanUse::Large).unwrap();
    // SAFETY: a span we were just handed, the size we asked for.
    unsafe { (span as *mut u8).write_bytes(7, BYTES) };
    // SAFETY: handed out above, nothing live in it.
    unsafe { arena.free_span(span, UNITS) };
    Instant::now()
}

#[test]
fn a_pool_keeps_memory_over_pauses_it_came_back_after_until_it_goes_quiet() {
    let arena = arena();
    let region = arena.pool(0, Pool::Sparse);
    let decommitted = || region.decommitted.load(Ordering::Relaxed);

    round(arena);
    sleep(PAUSE);
    // The first purge after the pause finds the buffer waited the delay: it goes.
    arena.purge(false);
    assert_eq!(decommitted(), BYTES, "the first pause returns the buffer");
    // The next round takes it back at once: the decommit came too early.
    let freed = round(arena);
    sleep(PAUSE);
    arena.purge(false);
    if freed.elapsed().as_nanos() < STRETCHED_NS {
        assert_eq!(decommitted(), BYTES, "the second pause keeps the buffer");
        assert_eq!(region.dirty_bytes(), BYTES);
    }
    // The maintenance thread's pass: the first saw the round's hand-out, the next finds the
    // pool quiet and returns what waited the policy's own delay.
    region.purge_quiet(arena.map(), POLICY);
    let before_quiet = decommitted();
    region.purge_quiet(arena.map(), POLICY);
    assert_eq!(decommitted(), 2 * BYTES, "a quiet pool returns the buffer");
    assert!(before_quiet <= 2 * BYTES);
    assert_eq!(region.dirty_bytes(), 0);
}

#[test]
fn a_pool_whose_quiet_purge_came_back_after_a_pause_keeps_memory_over_the_next_pause() {
    let arena = arena();
    let region = arena.pool(0, Pool::Sparse);
    let decommitted = || region.decommitted.load(Ordering::Relaxed);
    // The maintenance thread's pass right after a round sees its hand-out (a busy pool, the
    // buffer too young to go); the pass after the pause finds the pool quiet.
    let pause_with_passes = || {
        region.purge_quiet(arena.map(), POLICY);
        sleep(PAUSE);
        region.purge_quiet(arena.map(), POLICY);
    };

    round(arena);
    pause_with_passes();
    assert_eq!(decommitted(), BYTES, "the quiet pool returns the buffer");
    // The program comes back after its pause and takes it again.
    let freed = round(arena);
    pause_with_passes();
    if freed.elapsed().as_nanos() < STRETCHED_NS {
        assert_eq!(
            decommitted(),
            BYTES,
            "the pause after the second round returned the buffer again"
        );
        assert_eq!(region.dirty_bytes(), BYTES);
    }
    // Quiet for longer than twice the pause it showed: the buffer goes.
    sleep(Duration::from_nanos(STRETCHED_NS as u64));
    region.purge_quiet(arena.map(), POLICY);
    assert_eq!(
        decommitted(),
        2 * BYTES,
        "a pool quiet for good keeps its memory"
    );
    assert_eq!(region.dirty_bytes(), 0);
}
