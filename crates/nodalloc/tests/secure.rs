//! Secure mode (`NODALLOC_SECURE=1`) through the Rust face: each scenario runs in a child process
//! of this binary (options are read once, at the first allocation), with nodalloc as its global
//! allocator. Misuse scenarios must kill the child with nodalloc's one-line message (or, for an
//! overflow into a guard page, with SIGSEGV); the others must finish and print their marker.
//!
//! Every scenario would pass silently, or print something else, without secure mode: the double
//! frees go unnoticed (the Rust face has no free-time check of its own pointers), the overwritten
//! link is followed, the byte past a large object lands in its span's slack, and a new bag hands
//! out its objects in address order.

use nodalloc::NodAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::{CommandExt, ExitStatusExt};

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::{check, check_moved, child_command, expect_child, fill, hand_off_ring, use_every_cpu};

const SECURE: &[(&str, &str)] = &[("NODALLOC_SECURE", "1")];
const NOT_SECURE: &[(&str, &str)] = &[("NODALLOC_SECURE", "0")];
/// The value a use-after-free write leaves in a freed object's first word.
const GARBAGE: u64 = 0x4141_4141_4141_4141;
const SIGABRT: i32 = 6;
const SIGSEGV: i32 = 11;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn alloc(size: usize) -> *mut u8 {
    // SAFETY: a valid, non-zero layout.
    let p = unsafe { GLOBAL.alloc(layout(size)) };
    assert!(!p.is_null(), "alloc({size}) failed");
    p
}

/// # Safety
/// `p` must come from `alloc(size)`; the double-free scenarios break this on purpose.
unsafe fn free(p: *mut u8, size: usize) {
    // SAFETY: forwarded contract.
    unsafe { GLOBAL.dealloc(p, layout(size)) }
}

/// Tells the parent which pointer the next call concerns (it must appear in the message).
fn announce(p: *const u8) {
    eprintln!("pointer {p:p}");
}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var("NODALLOC_TEST_CHILD") else {
        return;
    };
    match scenario.as_str() {
        "double-free-interleaved" => {
            let (a, b) = (alloc(64), alloc(64));
            announce(a);
            // SAFETY: deliberately freeing `a` twice, with another free in between.
            unsafe {
                free(a, 64);
                free(b, 64);
                free(a, 64);
            }
        }
        "double-free-after-drain" => {
            // `a` leaves the thread's cache (300 later frees drain it to the node heap) before
            // it is freed again: no cheap screen of the cache could see it.
            let a = alloc(48);
            let others: Vec<*mut u8> = (0..300).map(|_| alloc(48)).collect();
            announce(a);
            // SAFETY: the others are freed once; `a` twice, on purpose.
            unsafe {
                free(a, 48);
                for &other in &others {
                    free(other, 48);
                }
                let again: Vec<*mut u8> = (0..10).map(|_| alloc(48)).collect();
                assert!(!again.contains(&a), "a freed object was handed out before");
                free(a, 48);
            }
        }
        "write-after-free" => {
            let a = alloc(64);
            announce(a);
            // SAFETY: `a` is freed, then written through (the misuse under test).
            unsafe {
                free(a, 64);
                (a as *mut u64).write_volatile(GARBAGE);
            }
            let b = alloc(64);
            eprintln!("allocation after the overwrite returned {b:p}");
            let c = alloc(64);
            eprintln!("and then {c:p}");
        }
        "overflow-large" => {
            let size = 1 << 20;
            let p = alloc(size);
            fill(p, size);
            check(p, size);
            eprintln!("wrote {size} bytes; one more");
            // SAFETY: none: one byte past the object, the misuse under test.
            unsafe { p.add(size).write_volatile(1) };
            eprintln!("the overflow did not fault");
        }
        "overflow-after-realloc" => {
            // Grown, then shrunk (in place or moved): the guard follows the usable end.
            let p = alloc(300 << 10);
            fill(p, 300 << 10);
            // SAFETY: `p` is live with this layout; the results are checked.
            let q = unsafe { GLOBAL.realloc(p, layout(300 << 10), 3 << 20) };
            assert!(!q.is_null());
            check_moved(q, p as usize, 300 << 10);
            // SAFETY: as above.
            let r = unsafe { GLOBAL.realloc(q, layout(3 << 20), (2 << 20) + 4096) };
            assert!(!r.is_null());
            check_moved(r, p as usize, 300 << 10);
            // SAFETY: all of it is the object's.
            unsafe { r.write_bytes(7, (2 << 20) + 4096) };
            eprintln!("wrote the reallocated object; one byte more");
            // SAFETY: none: one byte past the object, the misuse under test.
            unsafe { r.add((2 << 20) + 4096).write_volatile(1) };
            eprintln!("the overflow did not fault");
        }
        "bag-order" => {
            // A class the test harness does not use (2000 B: 16 per bag), so its first
            // allocations carve a new bag. Offsets within the 32 KiB bag, in hand-out order.
            let objects: Vec<*mut u8> = (0..16).map(|_| alloc(2000)).collect();
            let offsets: Vec<String> = objects
                .iter()
                .map(|&p| (p as usize % (32 << 10)).to_string())
                .collect();
            eprintln!("order {}", offsets.join(","));
        }
        "stress" => stress(4, 20_000),
        "double-free-unchecked" => {
            // Secure mode off: what the README documents for the Rust face. The double free is
            // not checked on the fast path, and the cache hands `a` out twice. A class nothing
            // else uses keeps the damage to this scenario; it exits at once.
            let (a, b) = (alloc(2500), alloc(2500));
            // SAFETY: deliberately freeing `a` twice.
            unsafe {
                free(a, 2500);
                free(b, 2500);
                free(a, 2500);
            }
            let (x, y, z) = (alloc(2500), alloc(2500), alloc(2500));
            if x == a && y == b && z == a {
                eprintln!("the double free went unnoticed: a was handed out twice");
            }
            std::process::exit(0);
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// `threads` threads allocate random sizes (small and large), fill them, reallocate one in
/// eight, pass half to a neighbour that checks and frees them, and free the rest themselves.
fn stress(threads: usize, ops: usize) {
    // Spread the workers over every node, not the harness thread's one.
    use_every_cpu();
    hand_off_ring(
        threads,
        ops,
        |rng| {
            let size = rng.size();
            let p = alloc(size);
            fill(p, size.min(512));
            if rng.next() % 8 != 0 {
                return (p as usize, size);
            }
            let new_size = rng.size();
            // SAFETY: `p` is live with this layout; the result is checked.
            let q = unsafe { GLOBAL.realloc(p, layout(size), new_size) };
            assert!(!q.is_null());
            check_moved(q, p as usize, size.min(new_size).min(512));
            fill(q, new_size.min(512));
            (q as usize, new_size)
        },
        // SAFETY: each object was allocated by `make` with this size and is freed once.
        |p, size| unsafe { free(p as *mut u8, size) },
    );
    let nodes = nodalloc::topology().unwrap().node_count();
    // Scheduling decides whether the ring crossed nodes; make sure frees certainly do: a thread
    // frees objects of another node than its own (its exit sends them home).
    if nodes > 1 {
        std::thread::spawn(move || {
            let other = (nodalloc::current_node() + 1) % nodes;
            for size in [24, 700, 40_000, 300_000] {
                let layout = std::alloc::Layout::from_size_align(size, 8).unwrap();
                let p = GLOBAL.alloc_on_node(layout, other);
                assert!(!p.is_null(), "alloc_on_node({size}, {other})");
                // SAFETY: a fresh allocation of `size` bytes.
                unsafe { p.write_bytes(0x5A, size) };
                // SAFETY: as above; read back what was written.
                let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                assert!(bytes.iter().all(|&b| b == 0x5A));
                // SAFETY: allocated above with this layout, freed once.
                unsafe { GLOBAL.dealloc(p, layout) };
            }
        })
        .join()
        .unwrap();
    }
    let remote_frees = nodalloc::stats().remote_frees;
    assert!(
        nodes == 1 || remote_frees > 0,
        "no remote frees on {nodes} nodes"
    );
    eprintln!("stress ok: {nodes} nodes, {remote_frees} remote frees");
}

/// Runs a scenario that must die; returns (signal, stderr). No core file is left behind.
fn run_dying(scenario: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = child_command(scenario, env);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let output = command.output().expect("run the test binary");
    (
        output.status.signal(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The pointer a scenario announced.
fn announced(stderr: &str) -> &str {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("pointer "))
        .unwrap_or_else(|| panic!("the child announced no pointer:\n{stderr}"))
}

fn assert_aborts_with(scenario: &str, expected: impl Fn(&str) -> String) {
    let (signal, stderr) = run_dying(scenario, SECURE);
    assert_eq!(
        signal,
        Some(SIGABRT),
        "{scenario} should abort in secure mode:\n{stderr}"
    );
    let line = expected(announced(&stderr));
    assert!(
        stderr.lines().any(|l| l.starts_with(&line)),
        "{scenario}: no line starting with `{line}`:\n{stderr}"
    );
}

#[test]
fn a_double_free_with_another_free_in_between_aborts_naming_the_pointer() {
    assert_aborts_with("double-free-interleaved", |p| {
        format!("nodalloc: free(): double free of {p}")
    });
}

#[test]
fn a_double_free_of_an_object_that_left_the_thread_cache_aborts() {
    assert_aborts_with("double-free-after-drain", |p| {
        format!("nodalloc: free(): double free of {p}")
    });
}

#[test]
fn a_write_after_free_into_the_link_aborts_instead_of_handing_out_garbage() {
    assert_aborts_with("write-after-free", |p| {
        format!("nodalloc: corrupted free list: freed object {p} holds {GARBAGE:#x}, ")
    });
}

#[test]
fn one_byte_past_a_large_object_hits_its_guard_page() {
    for scenario in ["overflow-large", "overflow-after-realloc"] {
        let (signal, stderr) = run_dying(scenario, SECURE);
        assert_eq!(
            signal,
            Some(SIGSEGV),
            "{scenario}: the overflow should fault:\n{stderr}"
        );
        assert!(
            stderr.contains("one more") || stderr.contains("one byte more"),
            "{scenario}: faulted before the overflow:\n{stderr}"
        );
    }
}

/// The order in which a fresh bag hands out its objects: random, so different in two runs and
/// not the address order a plain bag uses.
#[test]
fn a_new_bag_hands_out_its_objects_in_a_random_order() {
    let order = || {
        let stderr = expect_child("bag-order", SECURE, "order ");
        let line = stderr
            .lines()
            .find_map(|line| line.strip_prefix("order "))
            .unwrap()
            .to_string();
        line.split(',')
            .map(|offset| offset.parse::<usize>().unwrap())
            .collect::<Vec<_>>()
    };
    let (first, second) = (order(), order());
    assert_ne!(first, second, "two runs handed out the same order");
    for run in [&first, &second] {
        let ascending = run.windows(2).all(|w| w[0] < w[1]);
        let descending = run.windows(2).all(|w| w[0] > w[1]);
        assert!(!ascending && !descending, "address order: {run:?}");
    }
}

#[test]
fn threads_stress_with_content_checks_in_secure_mode() {
    expect_child("stress", SECURE, "stress ok");
    // Two simulated nodes: remote frees travel as encoded chains through outboxes and inboxes.
    expect_child(
        "stress",
        &[("NODALLOC_SECURE", "1"), ("NODALLOC_SIMULATE_NODES", "2")],
        "stress ok: 2 nodes",
    );
}

#[test]
fn without_secure_mode_a_double_free_goes_unnoticed_on_the_fast_path() {
    expect_child(
        "double-free-unchecked",
        NOT_SECURE,
        "the double free went unnoticed",
    );
}
