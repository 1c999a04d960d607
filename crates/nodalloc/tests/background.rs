//! The maintenance thread through the Rust face (`NODALLOC_BACKGROUND=1`,
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
            assert!(!nodalloc::start_background(), "started without the option");
            std::thread::sleep(std::time::Duration::from_millis(150));
            assert_eq!(nodalloc::stats().background_passes, 0);
            eprintln!("off ok");
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn start_background_runs_the_maintenance_thread_when_the_option_asks() {
    expect_child("start", &[("NODALLOC_BACKGROUND", "1")], "start ok");
}

#[test]
fn start_background_does_nothing_without_the_option() {
    expect_child("off", &[], "off ok");
}
