//! nodalloc as the global allocator of this test binary: every allocation of the test harness,
//! std and the tests goes through it.
//!
//! Tests that need a different environment (a simulated topology, an abort) re-run this binary
//! as a child process with `NODALLOC_TEST_CHILD` naming the scenario, since options are read
//! once, at the first allocation.

use nodalloc::NodAlloc;
use std::alloc::{GlobalAlloc, Layout};

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
#[path = "global_allocator/scenarios.rs"]
mod scenarios;
use common::{
    check, child_command, expect_child, fill, limit_address_space, run_bounded, run_child,
};

/// The scenarios that move threads between simulated nodes need a CPU per node.
fn has_two_cpus() -> bool {
    // The process's CPUs (its main thread's mask), not this test thread's: nodalloc may have
    // bound the test thread to one node's CPUs at its first allocation.
    // SAFETY: a zeroed cpu_set_t is valid; the kernel writes at most its size.
    let two = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(libc::getpid(), std::mem::size_of_val(&set), &mut set) == 0
            && libc::CPU_COUNT(&set) >= 2
    };
    if !two {
        nodalloc_testkit::skip(nodalloc_testkit::Need::OnCi, "needs two CPUs");
    }
    two
}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var("NODALLOC_TEST_CHILD") else {
        return;
    };
    match scenario.as_str() {
        "stress" => scenarios::stress(8, 20_000),
        "invalid-free" => {
            let on_stack = [0u64; 4];
            // SAFETY: deliberately wrong: the allocator must abort naming the pointer.
            unsafe { GLOBAL.dealloc(on_stack.as_ptr() as *mut u8, Layout::new::<[u64; 4]>()) };
        }
        "invalid-large-free" => {
            let layout = Layout::from_size_align(1 << 20, 8).unwrap();
            // SAFETY: allocate a large object, then free a pointer into its middle.
            unsafe {
                let p = GLOBAL.alloc(layout);
                GLOBAL.dealloc(p.add(4096), layout);
            }
        }
        "double-free-large" => {
            let layout = Layout::from_size_align(1 << 20, 8).unwrap();
            // SAFETY: deliberately freeing twice.
            unsafe {
                let p = GLOBAL.alloc(layout);
                GLOBAL.dealloc(p, layout);
                GLOBAL.dealloc(p, layout);
            }
        }
        "repin" => scenarios::repin(),
        "rehome" => scenarios::rehome(),
        "small-address-space" => scenarios::small_address_space(),
        "fork" => scenarios::fork(),
        "limit" => scenarios::limit(),
        "tiers" => scenarios::tiers(),
        "tier-scope" => scenarios::tier_scope(),
        "auto-tiering" => scenarios::auto_tiering(),
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn collections_work_on_nodalloc() {
    let mut map = std::collections::HashMap::new();
    for i in 0..100_000u64 {
        map.insert(i, format!("value {i}"));
    }
    assert_eq!(map[&77_777], "value 77777");
    let text: String = (0..10_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(text.len(), 10_000);
    let ptr = text.as_ptr();
    assert!(
        nodalloc::node_of(ptr).is_some(),
        "a String's buffer comes from nodalloc"
    );
    assert!(nodalloc::stats().allocated > 0);
}

#[test]
fn every_size_and_alignment_is_served_and_aligned() {
    for align_shift in 0..=20 {
        let align = 1usize << align_shift;
        for size in [
            1usize,
            7,
            8,
            15,
            16,
            17,
            100,
            1000,
            4096,
            5000,
            65536,
            300_000,
            3 << 20,
        ] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a valid non-zero layout.
            let p = unsafe { GLOBAL.alloc(layout) };
            assert!(!p.is_null(), "size {size} align {align}");
            assert_eq!(p as usize % align, 0, "size {size} align {align}");
            fill(p, size.min(4096));
            check(p, size.min(4096));
            // SAFETY: allocated above with this layout.
            unsafe { GLOBAL.dealloc(p, layout) };
        }
    }
}

/// Alignments past a huge page, up to 1 GiB, for sizes below, at and above the alignment: each
/// block aligned, its head and last byte kept. (Aligned spans were once aligned relative to the
/// region's start, which is only 2 MiB aligned.)
#[test]
fn alignments_up_to_a_gibibyte_are_honoured() {
    for align_shift in 21..=30 {
        let align = 1usize << align_shift;
        let layouts: Vec<Layout> = [1, 4096, align, 3 * align]
            .into_iter()
            .map(|size| Layout::from_size_align(size, align).unwrap())
            .collect();
        let blocks: Vec<*mut u8> = layouts
            .iter()
            .enumerate()
            .map(|(i, layout)| {
                // SAFETY: a valid non-zero layout.
                let p = unsafe { GLOBAL.alloc(*layout) };
                assert!(!p.is_null(), "{layout:?}");
                assert_eq!(p as usize % align, 0, "{layout:?} gave {p:?}");
                // SAFETY: the block holds `layout.size()` bytes.
                unsafe {
                    p.write_bytes(i as u8 + 1, layout.size().min(4096));
                    p.add(layout.size() - 1).write(i as u8 + 1);
                }
                p
            })
            .collect();
        for (i, (&p, layout)) in blocks.iter().zip(&layouts).enumerate() {
            // SAFETY: written above, still live.
            unsafe {
                assert_eq!(*p, i as u8 + 1, "{layout:?}: head overwritten");
                assert_eq!(*p.add(layout.size() - 1), i as u8 + 1, "{layout:?}: tail");
                GLOBAL.dealloc(p, *layout);
            }
        }
    }
}

#[test]
fn impossible_requests_return_null() {
    let layout = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
    // SAFETY: a valid layout the allocator cannot serve.
    assert!(unsafe { GLOBAL.alloc(layout) }.is_null());
    let layout = Layout::from_size_align(1 << 50, 8).unwrap();
    // SAFETY: as above.
    assert!(unsafe { GLOBAL.alloc(layout) }.is_null());
}

#[test]
fn realloc_keeps_contents_across_classes_and_grows_large_buffers_in_place() {
    let mut layout = Layout::from_size_align(1, 8).unwrap();
    // SAFETY: a valid layout.
    let mut p = unsafe { GLOBAL.alloc(layout) };
    // SAFETY: we own one byte.
    unsafe { *p = 0x5A };
    let mut moves_after_1mib = 0;
    let mut size = 1;
    while size < 64 << 20 {
        let new_size = if size < 65536 { size * 2 } else { size + 65536 };
        // SAFETY: `p` is live with `layout`; the new size is valid.
        let q = unsafe { GLOBAL.realloc(p, layout, new_size) };
        assert!(!q.is_null());
        // SAFETY: the first byte survived every move.
        assert_eq!(unsafe { *q }, 0x5A, "at size {new_size}");
        if q != p && size >= 1 << 20 {
            moves_after_1mib += 1;
        }
        p = q;
        layout = Layout::from_size_align(new_size, 8).unwrap();
        // SAFETY: touch the last byte of the grown buffer.
        unsafe { *p.add(new_size - 1) = 1 };
        size = new_size;
    }
    assert!(
        moves_after_1mib < 10,
        "large buffer moved {moves_after_1mib} times"
    );
    // SAFETY: allocated above.
    unsafe { GLOBAL.dealloc(p, layout) };
}

#[test]
fn threads_stress_with_content_checks_and_balanced_stats() {
    scenarios::stress(4, 10_000);
}

#[test]
fn simulated_four_nodes_stress_sends_frees_home() {
    expect_child(
        "stress",
        &[("NODALLOC_SIMULATE_NODES", "4")],
        "stress ok: 4 nodes",
    );
}

#[test]
fn far_requests_land_on_the_far_node_the_option_names() {
    expect_child(
        "tiers",
        &[
            ("NODALLOC_SIMULATE_NODES", "3"),
            ("NODALLOC_TIERS", "near:0,1;far:2"),
        ],
        "tiers ok",
    );
}

#[test]
fn automatic_tiering_sends_a_quiet_scopes_bags_far_and_brings_them_back_when_busy() {
    expect_child(
        "auto-tiering",
        &[
            ("NODALLOC_SIMULATE_NODES", "3"),
            ("NODALLOC_TIERS", "near:0,1;far:2"),
            ("NODALLOC_CALLSITE", "64"),
            ("NODALLOC_TIERING", "auto"),
            ("NODALLOC_COOLING", "200"),
        ],
        "auto-tiering ok",
    );
}

#[test]
fn a_far_scope_sends_every_allocation_of_the_thread_far() {
    expect_child(
        "tier-scope",
        &[
            ("NODALLOC_SIMULATE_NODES", "3"),
            ("NODALLOC_TIERS", "near:0,1;far:2"),
        ],
        "tier-scope ok",
    );
}

#[test]
fn a_commit_on_demand_heap_serves_the_stress() {
    expect_child(
        "stress",
        &[
            ("NODALLOC_COMMIT", "demand"),
            ("NODALLOC_SIMULATE_NODES", "2"),
        ],
        "stress ok: 2 nodes",
    );
}

#[test]
fn a_repinned_thread_rehomes_and_binding_never_widens_a_mask() {
    if !has_two_cpus() {
        return;
    }
    expect_child("repin", &[("NODALLOC_SIMULATE_NODES", "2")], "repin ok");
}

#[test]
fn an_unbound_thread_follows_the_scheduler_to_another_node() {
    if !has_two_cpus() {
        return;
    }
    expect_child(
        "rehome",
        &[
            ("NODALLOC_SIMULATE_NODES", "2"),
            ("NODALLOC_BIND", "none"),
            ("NODALLOC_DECOMMIT_DELAY", "5"),
        ],
        "rehome ok",
    );
}

#[test]
fn children_of_a_busy_multithreaded_parent_can_allocate() {
    let (ok, stderr) = run_child("fork", &[]);
    assert!(ok && stderr.contains("fork ok"), "{stderr}");
}

#[test]
fn the_memory_limit_holds_under_eight_threads_and_frees_make_room() {
    expect_child("limit", &[("NODALLOC_LIMIT", "64M")], "limit ok");
}

#[test]
fn an_address_space_limit_shrinks_the_reservation_instead_of_failing() {
    let mut command = child_command("small-address-space", &[]);
    // `ulimit -v 2G`: the default 1 TiB reservation cannot fit; the arena must shrink to it.
    limit_address_space(&mut command, 2 << 30);
    let (ok, stderr) = run_bounded(command);
    assert!(ok, "child failed under RLIMIT_AS=2G:\n{stderr}");
    assert!(stderr.contains("small address space ok"), "{stderr}");
}

#[test]
fn invalid_free_aborts_naming_the_pointer() {
    let (ok, stderr) = run_child("invalid-free", &[]);
    assert!(!ok);
    assert!(
        stderr.contains("nodalloc: free(): invalid pointer 0x"),
        "{stderr}"
    );
    let (ok, stderr) = run_child("invalid-large-free", &[]);
    assert!(!ok);
    assert!(
        stderr.contains("nodalloc: free(): invalid pointer 0x"),
        "{stderr}"
    );
    let (ok, stderr) = run_child("double-free-large", &[]);
    assert!(!ok);
    assert!(
        stderr.contains("nodalloc: free(): double free of 0x"),
        "{stderr}"
    );
}

#[test]
fn bad_option_values_warn_and_use_the_default() {
    let (ok, stderr) = run_child(
        "stress",
        &[("NODALLOC_BIND", "sideways"), ("NODALLOC_RETAIN", "lots")],
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("nodalloc: warning: NODALLOC_BIND=sideways is not valid"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nodalloc: warning: NODALLOC_RETAIN=lots is not valid"),
        "{stderr}"
    );
}

#[test]
fn alloc_on_node_places_on_that_node() {
    let node_count = nodalloc::topology().unwrap().node_count();
    for node in 0..node_count {
        for size in [64, 100_000, 1 << 20] {
            let layout = Layout::from_size_align(size, 8).unwrap();
            let p = GLOBAL.alloc_on_node(layout, node);
            assert!(!p.is_null());
            assert_eq!(nodalloc::node_of(p), Some(node));
            // SAFETY: allocated above with this layout.
            unsafe { GLOBAL.dealloc(p, layout) };
        }
    }
    assert!(GLOBAL
        .alloc_on_node(Layout::new::<u64>(), node_count)
        .is_null());
}
