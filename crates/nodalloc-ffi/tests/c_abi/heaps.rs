//! First-class heaps through the C API (`tests/c/heaps.c`): the contract, and the misuse of a
//! handle whose heap was destroyed.

use super::*;

#[test]
fn heaps_serve_free_realloc_limit_and_destroy_through_the_c_api() {
    for mode in MODES {
        run_passing("heaps", mode, &mut command("heaps", mode));
    }
}

/// Heaps on a chosen node and on the far node, on three simulated nodes of which node 2 is
/// far memory: every block is on its heap's node.
#[test]
fn heaps_hand_out_blocks_of_their_node() {
    for mode in MODES {
        let mut program = command("heaps", mode);
        program.arg("placement").envs([
            ("NODALLOC_SIMULATE_NODES", "3"),
            ("NODALLOC_TIERS", "far:2"),
        ]);
        run_passing("heaps", mode, &mut program);
    }
}

/// The contract again in secure mode: heap blocks skip secure mode's wrapping layer and its
/// quarantine, and plain `free` still takes them back.
#[test]
fn heaps_keep_their_contract_in_secure_mode() {
    for mode in MODES {
        let mut program = command("heaps", mode);
        program.env("NODALLOC_SECURE", "1");
        run_passing("heaps", mode, &mut program);
    }
}

/// A second destroy, and an allocation from a destroyed heap, abort naming the heap.
#[test]
fn a_destroyed_heaps_handle_is_refused_with_an_abort() {
    for (case, what) in [
        ("double-destroy", "a drop of heap "),
        ("malloc-after-destroy", "an allocation of heap "),
    ] {
        assert_program_aborts("heaps", case, &[], |_| format!("nodalloc: {what}"));
    }
}

/// A heap's block freed after its heap was destroyed: its memory went back with the heap, so
/// the free is refused with an abort naming the block. Default mode's block is its bag's first
/// object, at a unit boundary, where the free span's tag says "double free". Secure mode places
/// it at a random object of its bag: inside a unit there is no object to free ("invalid
/// pointer"), at a unit boundary (about one run in a hundred) the same "double free".
#[test]
fn a_block_freed_after_its_heap_was_destroyed_is_refused() {
    assert_program_aborts("heaps", "free-after-destroy", &[], |pointer| {
        format!("nodalloc: free(): double free of {pointer}")
    });
    assert_program_aborts_with_one_of(
        "heaps",
        "free-after-destroy",
        &[("NODALLOC_SECURE", "1")],
        |pointer| {
            ["invalid pointer", "double free of"]
                .map(|message| format!("nodalloc: free(): {message} {pointer}"))
                .to_vec()
        },
    );
}
