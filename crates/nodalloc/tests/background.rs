//! The maintenance thread through the Rust face (`NODALLOC_BACKGROUND`: `release` by default, `1`, `0`;
//! `nodalloc::start_background()`): each scenario runs in a child process of this binary
//! (options are read once, at the first allocation), with nodalloc as its global allocator.

use nodalloc::NodAlloc;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::expect_child;

fn churn() {
    for round in 0..5u8 {
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![round; 16 + i % 500]).collect();
        assert!(blocks.iter().all(|block| block[0] == round));
    }
}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var("NODALLOC_TEST_CHILD") else {
        return;
    };
    match scenario.as_str() {
        "start" => {
            churn();
            assert!(
                nodalloc::start_background(),
                "the maintenance thread did not start"
            );
            assert!(
                nodalloc::start_background(),
                "a second start should find it running"
            );
            churn();
            std::thread::sleep(std::time::Duration::from_millis(350));
            let passes = nodalloc::stats().background_passes;
            assert!(passes >= 2, "{passes} maintenance passes in 350 ms");
            eprintln!("start ok: {passes} passes");
        }
        "off" => {
            churn();
            assert!(!nodalloc::start_background(), "started with the option off");
            std::thread::sleep(std::time::Duration::from_millis(150));
            assert_eq!(nodalloc::stats().background_passes, 0);
            eprintln!("off ok");
        }
        "releases" => releases_are_the_maintenance_threads(),
        "prepare" => a_growing_heap_gets_prepared_chunks_that_go_back_when_it_stops(),
        "limit" => the_limit_holds_with_releases_in_flight(),
        "stretch" => memory_kept_over_pauses_goes_back_once_quiet(),
        other => panic!("unknown scenario {other}"),
    }
}

/// Bytes the program's own threads gave back to the OS (all of it minus the maintenance
/// thread's share).
fn decommitted_by_program_threads(stats: &nodalloc::Stats) -> usize {
    stats.decommitted - stats.background_decommitted as usize
}

/// Waits up to two seconds for `done`, checking every 10 ms.
fn within_two_seconds(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    done()
}

/// With the thread running, freeing 64 MiB of large blocks makes no `madvise` on the freeing
/// thread; the maintenance thread gives the memory back within the decommit delay.
fn releases_are_the_maintenance_threads() {
    assert!(nodalloc::start_background());
    let before = nodalloc::stats();
    let blocks: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8 + 1; 1 << 20]).collect();
    let committed = nodalloc::stats().committed;
    drop(blocks);
    for round in 0..50u8 {
        // Churn that takes the slow paths (upkeep included) while releases are due.
        let small: Vec<Vec<u8>> = (0..2_000).map(|i| vec![round; 100 + i % 3_000]).collect();
        drop(small);
    }
    // The maintenance thread counts a step's decommits once the step ends: a snapshot taken
    // inside the step sees the memory gone and not yet counted as its. Wait for both.
    within_two_seconds(|| {
        let now = nodalloc::stats();
        now.committed + (48 << 20) <= committed
            && decommitted_by_program_threads(&now) == decommitted_by_program_threads(&before)
    });
    let after = nodalloc::stats();
    assert!(
        after.committed + (48 << 20) <= committed,
        "committed {} MiB, {} MiB after the frees",
        committed >> 20,
        after.committed >> 20
    );
    assert_eq!(
        decommitted_by_program_threads(&after),
        decommitted_by_program_threads(&before),
        "the program's thread made releases itself: {after:?}"
    );
    eprintln!(
        "releases ok: {} MiB by the maintenance thread",
        after.background_decommitted >> 20
    );
}

/// A heap that grows for a while gets chunks populated and bags of big objects carved ahead of
/// it; once it stops and frees everything, what was prepared goes back to the OS like any free
/// memory.
fn a_growing_heap_gets_prepared_chunks_that_go_back_when_it_stops() {
    assert!(nodalloc::start_background());
    let mut objects: Vec<Box<[u8; 256]>> = Vec::new();
    let mut big: Vec<Vec<u8>> = Vec::new();
    // Grows by 2 MiB of small and 1.3 MB of big objects every 3 ms, for at least 40 steps
    // and until both kinds were prepared (at most 200 steps: a busy machine may run the
    // maintenance thread late).
    for step in 0..200 {
        objects.extend((0..8_192).map(|_| Box::new([step as u8; 256])));
        big.extend((0..64).map(|_| vec![step as u8; 20_000]));
        std::thread::sleep(std::time::Duration::from_millis(3));
        let stats = nodalloc::stats();
        if step >= 40 && stats.background_prepared >= 1 && stats.background_bags >= 1 {
            break;
        }
    }
    let stats = nodalloc::stats();
    let (prepared, bags) = (stats.background_prepared, stats.background_bags);
    assert!(prepared >= 1, "no chunk prepared for a growing heap");
    assert!(
        bags >= 1,
        "no bag of 20 kB objects prepared for a growing heap"
    );
    drop(big);
    let live = nodalloc::stats().committed;
    drop(objects);
    let settled = within_two_seconds(|| nodalloc::stats().committed <= 8 << 20);
    let after = nodalloc::stats();
    assert!(
        settled,
        "{} MiB committed a while after freeing {} MiB: {after:?}",
        after.committed >> 20,
        live >> 20
    );
    eprintln!("prepare ok: {prepared} chunks and {bags} bags prepared");
}

/// `NODALLOC_LIMIT` stays exact while free memory waits for the maintenance thread: memory
/// freed but not yet given back counts against the limit, and an allocation that needs it
/// gets it (the free spans are decommitted first) instead of failing.
fn the_limit_holds_with_releases_in_flight() {
    assert!(nodalloc::start_background());
    const LIMIT: usize = 48 << 20;
    for round in 0..200usize {
        // Alternate sizes so a freed span is not simply reused whole.
        let size = (40 << 20) - (round % 7) * (1 << 20) + (round % 3) * 4096;
        let block = vec![round as u8; size];
        assert_eq!(block[size - 1], round as u8);
        drop(block);
        let stats = nodalloc::stats();
        assert!(
            stats.peak_committed <= LIMIT,
            "peak committed {} over the limit",
            stats.peak_committed
        );
    }
    eprintln!("limit ok");
}

/// A program that pauses between rounds of the same work (without the maintenance thread, so
/// nothing runs while it pauses): the first pause's memory goes back at the next round's first
/// upkeep and is faulted straight back in; the pool then stretches its delay, and the next pause
/// keeps it. Once the maintenance thread runs and the program goes quiet, it goes back.
fn memory_kept_over_pauses_goes_back_once_quiet() {
    const PAUSE: std::time::Duration = std::time::Duration::from_millis(300);
    // Four 16 MiB buffers written whole (past the hold and the blocks a thread keeps), after
    // small allocations that take the slow paths, where a due upkeep purges.
    let round = |tag: u8| {
        let small: Vec<Box<[u8; 64]>> = (0..20_000).map(|_| Box::new([tag; 64])).collect();
        drop(small);
        let blocks: Vec<Vec<u8>> = (0..4).map(|_| vec![tag; 16 << 20]).collect();
        assert!(blocks.iter().all(|block| block[(16 << 20) - 1] == tag));
        drop(blocks);
        std::time::Instant::now()
    };
    round(1);
    std::thread::sleep(PAUSE);
    let before = nodalloc::stats().decommitted;
    let second = round(2);
    let returned = nodalloc::stats().decommitted - before;
    assert!(
        returned >= 48 << 20,
        "the first pause's buffers were not returned: {} MiB",
        returned >> 20
    );
    std::thread::sleep(PAUSE);
    let before = nodalloc::stats().decommitted;
    round(3);
    let returned = nodalloc::stats().decommitted - before;
    // The stretched delay covers twice the pause (800 ms); a machine too busy to come back
    // within it proves nothing either way.
    if second.elapsed() < std::time::Duration::from_millis(750) {
        assert!(
            returned < 16 << 20,
            "the second pause returned {} MiB: the delay did not stretch",
            returned >> 20
        );
    }
    let committed = nodalloc::stats().committed;
    assert!(committed >= 48 << 20, "{} MiB committed", committed >> 20);
    assert!(nodalloc::start_background());
    let gone = within_two_seconds(|| nodalloc::stats().committed <= 16 << 20);
    assert!(
        gone,
        "a quiet program keeps {} MiB",
        nodalloc::stats().committed >> 20
    );
    eprintln!("stretch ok");
}

#[test]
fn a_stretched_delay_keeps_memory_over_pauses_until_the_program_goes_quiet() {
    expect_child("stretch", &[("NODALLOC_RETAIN", "0")], "stretch ok");
}

#[test]
fn with_the_thread_running_releases_are_its_own() {
    expect_child(
        "releases",
        &[("NODALLOC_BACKGROUND", "1"), ("NODALLOC_RETAIN", "0")],
        "releases ok",
    );
}

#[test]
fn prepared_chunks_follow_a_growing_heap_and_go_back_when_it_stops() {
    expect_child(
        "prepare",
        &[("NODALLOC_BACKGROUND", "1"), ("NODALLOC_RETAIN", "0")],
        "prepare ok",
    );
}

#[test]
fn the_limit_is_exact_with_releases_in_flight() {
    expect_child(
        "limit",
        &[
            ("NODALLOC_BACKGROUND", "1"),
            ("NODALLOC_LIMIT", "48M"),
            ("NODALLOC_RETAIN", "0"),
        ],
        "limit ok",
    );
}

#[test]
fn start_background_runs_the_maintenance_thread_when_the_option_asks() {
    expect_child("start", &[("NODALLOC_BACKGROUND", "1")], "start ok");
}

/// The default (`release`): the thread starts and makes its upkeep passes.
#[test]
fn start_background_runs_the_upkeep_passes_by_default() {
    expect_child("start", &[], "start ok");
}

#[test]
fn start_background_does_nothing_with_the_option_off() {
    expect_child("off", &[("NODALLOC_BACKGROUND", "0")], "off ok");
}
