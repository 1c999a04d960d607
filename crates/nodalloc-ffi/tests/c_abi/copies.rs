//! `memcpy`, `memmove` and `memset` (`src/copy.rs`): correct calls run unharmed in both modes
//! and bounded; bounded (`NODALLOC_CHECK_COPIES=1`), a write that runs out of the object it
//! starts in aborts naming the object;
//! in secure mode a write past a block's end, before its start, or into a freed block aborts
//! naming the block before a byte is written.

use super::*;

#[test]
fn correct_copies_run_unharmed_in_default_and_secure_mode() {
    for secure in ["0", "1"] {
        for mode in MODES {
            let mut correct = command("copies", mode);
            correct.arg("correct").env("NODALLOC_SECURE", secure);
            run_passing("copies", mode, &mut correct);
        }
    }
}

/// Secure mode: `copies CASE` must die of SIGABRT naming the block.
fn assert_copy_aborts(case: &str, expected: impl Fn(&str) -> String) {
    assert_program_aborts("copies", case, &[("NODALLOC_SECURE", "1")], expected);
}

#[test]
fn secure_mode_refuses_a_copy_past_the_end_of_a_block() {
    for case in [
        "memcpy-past",
        "memmove-past",
        "memset-past",
        "memcpy-large-past",
        "memcpy-heap-past",
    ] {
        assert_copy_aborts(case, |pointer| {
            format!("nodalloc: heap overflow: a copy runs past the end of block {pointer}")
        });
    }
}

#[test]
fn secure_mode_refuses_a_copy_that_starts_before_a_block() {
    assert_copy_aborts("memcpy-before", |_| {
        // The copy starts in the block before, held or free: named after that block, or,
        // written past the free slot's middle, after the block it runs into.
        "nodalloc: heap ".to_string()
    });
}

#[test]
fn secure_mode_refuses_a_copy_into_a_freed_block() {
    assert_copy_aborts("memcpy-freed", |pointer| {
        format!("nodalloc: write after free: a copy writes into freed block {pointer}")
    });
}

#[test]
fn bounded_copies_and_secure_mode_refuse_a_copy_that_runs_out_of_its_object() {
    for case in [
        "memcpy-slot-past",
        "memmove-slot-past",
        "memset-slot-past",
        "memcpy-page-past",
        "memcpy-heap-past",
    ] {
        for env in [
            &[("NODALLOC_CHECK_COPIES", "1")][..],
            &[("NODALLOC_SECURE", "1")][..],
        ] {
            assert_program_aborts("copies", case, env, |pointer| {
                format!("nodalloc: heap overflow: a copy runs past the end of block {pointer}")
            });
        }
    }
}

#[test]
fn correct_copies_run_unharmed_when_bounded() {
    for mode in MODES {
        let mut correct = command("copies", mode);
        correct.arg("correct").env("NODALLOC_CHECK_COPIES", "1");
        run_passing("copies", mode, &mut correct);
    }
}

#[test]
fn default_mode_leaves_copies_unchecked_and_bounded_ones_to_the_class() {
    for mode in MODES {
        // Unless asked, the copies are the next library's, unchecked: a copy into the
        // neighbour is the program's business.
        let (_, finished) = run_to_announced_misuse("copies", "memcpy-slot-past", &[], mode);
        assert!(
            finished.stderr.contains("the bad call returned"),
            "copies memcpy-slot-past ({mode:?}) in default mode: {}",
            finished.describe()
        );
        // Bounded, a copy of 101 bytes into a 100-byte block lands in its class's slack, which
        // `malloc_usable_size` grants.
        let bounded = [("NODALLOC_CHECK_COPIES", "1")];
        let (_, finished) = run_to_announced_misuse("copies", "memcpy-past", &bounded, mode);
        assert!(
            finished.stderr.contains("the bad call returned"),
            "copies memcpy-past ({mode:?}) with NODALLOC_CHECK_COPIES=1: {}",
            finished.describe()
        );
    }
}
