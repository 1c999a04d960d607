//! Misuse of the heap: each case in a child that must die of SIGABRT with nodalloc's one-line
//! message naming the pointer.

use super::*;
use crate::hostile::assert_secure_program_aborts;

/// Runs `misuse MODE`, which prints the pointer it is about to free and frees it, and checks
/// that it dies of SIGABRT with exactly `nodalloc: free(): WHAT 0x…` on stderr.
fn assert_bad_free_aborts(misuse: &str, what: &str) {
    assert_bad_free_aborts_with(misuse, what, &[]);
}

/// As [`assert_bad_free_aborts`], with `env` set.
pub(crate) fn assert_bad_free_aborts_with(misuse: &str, what: &str, env: &[(&str, &str)]) {
    for mode in MODES {
        let (pointer, finished) = run_to_announced_misuse("misuse", misuse, env, mode);
        assert_eq!(
            finished.status.signal(),
            Some(SIGABRT),
            "misuse {misuse} ({mode:?}) should die of SIGABRT, but: {}",
            finished.describe()
        );
        let expected = format!("nodalloc: free(): {what} {pointer}");
        assert!(
            finished.stderr.lines().any(|line| line == expected),
            "misuse {misuse} ({mode:?}) ({}): stderr lacks the line `{expected}`: {}",
            describe_status(finished.status),
            finished.describe()
        );
    }
}

/// Runs `misuse CASE` (no secure mode) and checks that it dies of SIGABRT with a line on stderr
/// starting with `expected(pointer)`.
fn assert_misuse_aborts(case: &str, expected: impl Fn(&str) -> String) {
    assert_program_aborts("misuse", case, &[], expected);
}

#[test]
fn a_live_block_written_into_a_freed_blocks_link_is_refused_not_handed_out() {
    for case in ["forged-link", "forged-link-handed-on"] {
        assert_misuse_aborts(case, |pointer| {
            format!("nodalloc: corrupted free list: freed block {pointer} held 0x")
        });
    }
}

#[test]
fn an_overflow_into_a_freed_large_neighbour_aborts_when_the_spans_merge_or_the_block_grows() {
    for case in ["overflow-freed-large", "overflow-freed-large-realloc"] {
        assert_misuse_aborts(case, |pointer| {
            format!(
                "nodalloc: heap corruption: the freed block at {pointer} was written to at its start"
            )
        });
    }
}

#[test]
fn an_underflow_into_a_freed_large_neighbour_aborts_when_the_spans_merge() {
    assert_misuse_aborts("underflow-freed-large", |pointer| {
        format!(
            "nodalloc: heap corruption: the freed block at {pointer} was written to at its last word"
        )
    });
}

#[test]
fn a_write_after_free_at_the_start_of_a_large_block_aborts_when_its_memory_is_reused() {
    assert_misuse_aborts("write-freed-large", |pointer| {
        format!(
            "nodalloc: heap corruption: the freed block at {pointer} was written to at its start"
        )
    });
}

/// A freed block of 256 KiB to 2 MiB is held inaccessible until the next such free: a write
/// or a read through the dangling pointer faults at once.
#[test]
fn a_use_after_free_of_a_held_large_block_faults_at_the_access() {
    for case in ["write-held-large", "read-held-large"] {
        for mode in MODES {
            let (_, finished) = run_to_announced_misuse("misuse", case, &[], mode);
            assert_eq!(
                finished.status.signal(),
                Some(libc::SIGSEGV),
                "misuse {case} ({mode:?}) should fault, but: {}",
                finished.describe()
            );
            assert!(
                finished.stdout.contains("accessing") && !finished.stdout.contains("read "),
                "misuse {case} ({mode:?}) did not fault at the access: {}",
                finished.describe()
            );
        }
    }
}

#[test]
fn free_of_a_stack_pointer_aborts_naming_the_pointer() {
    assert_bad_free_aborts("stack", "invalid pointer");
}

#[test]
fn free_of_a_pointer_inside_a_large_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("middle", "invalid pointer");
}

#[test]
fn double_free_of_a_large_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double", "double free of");
}

#[test]
fn double_free_of_a_small_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double-small", "double free of");
}

#[test]
fn double_free_of_a_block_from_the_sparse_pool_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double-medium", "double free of");
}

#[test]
fn double_free_of_a_block_above_the_cached_classes_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double-big", "double free of");
}

#[test]
fn double_free_of_a_block_already_handed_on_to_the_node_heap_aborts_naming_the_pointer() {
    // A big block sent on to the ring by the next free, and a small one drained out of the
    // thread's cache by 300 others (secure.c's case, in default mode): the confirmation looks
    // in the ring and the bag.
    assert_bad_free_aborts("double-handed-on", "double free of");
    assert_secure_program_aborts("double-drained", &[], |pointer| {
        format!("nodalloc: free(): double free of {pointer}")
    });
}

#[test]
fn a_free_list_link_overwritten_with_an_address_outside_the_heap_is_never_followed() {
    for mode in MODES {
        let (pointer, finished) = run_to_announced_misuse("misuse", "poison", &[], mode);
        let expected = format!("nodalloc: corrupted free list: freed block {pointer} held 0x");
        assert!(
            finished.status.signal() == Some(SIGABRT)
                && finished
                    .stderr
                    .lines()
                    .any(|line| line.starts_with(&expected)),
            "misuse poison ({mode:?}) should abort with a line starting `{expected}`: {}",
            finished.describe()
        );
    }
}

#[test]
fn free_of_a_pointer_inside_a_small_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("middle-small", "invalid pointer");
}

/// `malloc_usable_size` sizes a small block of the thread's node on a hit of its own, which must
/// refuse a pointer into a block as `free`'s does and leave it to the general path's report.
#[test]
fn malloc_usable_size_of_a_pointer_inside_a_small_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("usable-middle-small", "invalid pointer");
}

#[test]
fn free_of_an_unused_address_of_the_region_aborts_naming_the_pointer() {
    // Both commit modes: with `demand`, the page map past the frontier was never committed (the
    // free fast path reads its tags all the same: they are mapped readable, as zero).
    assert_bad_free_aborts_with("unused", "invalid pointer", &[]);
    assert_bad_free_aborts_with(
        "unused",
        "invalid pointer",
        &[("NODALLOC_COMMIT", "demand")],
    );
}
