//! Unit tests of the node heaps: secure large objects and carving, zeroed carving, refills and
//! returns to the bags (their order, double frees), and the bag hand-over under contention
//! (`hand_over_under_contention`, shared with the sweep's tests). The rings: `ring_tests.rs`;
//! tiers: `tier_tests.rs`; spares: `spare_tests.rs`.

use super::*;
use crate::arena::tests::test_arena;
use crate::ds::{next_of, set_next};
use crate::size_class::class_of;
use core::ptr::null_mut;
use std::sync::atomic::AtomicU8;

/// The protection of the page holding `address`, from `/proc/self/maps` (`rw-p`, `---p`).
fn protection(address: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let (range, rest) = line.split_once(' ').unwrap();
        let (start, end) = range.split_once('-').unwrap();
        let start = usize::from_str_radix(start, 16).unwrap();
        let end = usize::from_str_radix(end, 16).unwrap();
        if (start..end).contains(&address) {
            return rest[..4].to_string();
        }
    }
    panic!("{address:#x} is not mapped");
}

#[test]
fn secure_large_objects_end_at_a_guard_that_follows_resizes_and_goes_with_the_free() {
    let heaps = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
    let page = crate::os::PAGE_SIZE;
    let size = (300 << 10) + 100;
    let p = heaps.alloc_large(NodeId(0), size, 8) as usize;
    let usable = heaps.large_usable(p).unwrap();
    assert_eq!(usable, (300 << 10) + page);
    assert_eq!(protection(p + usable - 1), "rw-p");
    assert_eq!(protection(p + usable), "---p");
    assert_eq!(heaps.usable_size(p), Ok(usable));
    // Grow (at the frontier, so in place), shrink by a unit, move the guard within the same
    // units, shrink by many.
    for new_size in [
        2 << 20,
        (2 << 20) - 3 * page,
        (2 << 20) - 5 * page,
        100 << 10,
    ] {
        assert!(
            heaps.resize_large_in_place(p, new_size),
            "resize to {new_size}"
        );
        let usable = heaps.large_usable(p).unwrap();
        assert_eq!(usable, new_size.next_multiple_of(page));
        // SAFETY: the object is ours and `usable` bytes long.
        unsafe { (p as *mut u8).write_bytes(1, usable) };
        assert_eq!(
            protection(p + usable),
            "---p",
            "after a resize to {new_size}"
        );
    }
    let units = heaps.large_units(p).unwrap();
    heaps.free_large(p);
    assert_eq!(protection(p + (units << UNIT_SHIFT) - 1), "rw-p");
    // The span is reused whole by the next request, guard and all in its new place.
    let q = heaps.alloc_large(NodeId(0), units << UNIT_SHIFT, 8) as usize;
    assert_eq!(protection(q + heaps.large_usable(q).unwrap()), "---p");
    assert_eq!(heaps.arena.budget().charged(), {
        heaps.arena.usage(0).committed
    });
}

#[test]
fn only_first_carves_from_untouched_bags_are_known_zero() {
    // Retain budget unlimited: freed bags stay dirty (committed, contents kept).
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let class = class_of(100_000, 8).unwrap();
    let (first, zeroed) = heaps
        .alloc_single_zeroed(NodeId(0), Partition::DEFAULT, class)
        .unwrap();
    assert!(zeroed, "a fresh bag's first object");
    // SAFETY: the object is ours, `class.size()` bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(first, class.size()) };
    assert!(bytes[8..].iter().all(|&b| b == 0));
    bytes.fill(0xA5);
    // Freed back into its bag's free list, then handed out again: not known zero.
    // SAFETY: a live object of `class` from node 0, given up.
    unsafe { heaps.free_single(NodeId(0), class, first) };
    let mut seen = Vec::new();
    loop {
        let (object, zeroed) = heaps
            .alloc_single_zeroed(NodeId(0), Partition::DEFAULT, class)
            .unwrap();
        seen.push(object);
        if object == first {
            assert!(!zeroed, "a reused object was reported zero");
            break;
        }
        assert!(seen.len() < 64, "the freed object never came back");
    }
    for object in seen {
        // SAFETY: each was handed out above and is given up once.
        unsafe { heaps.free_single(NodeId(0), class, object) };
    }
    // The bag falls empty, goes back to the pool dirty, and a new bag over the same memory
    // is not known zero either.
    let (again, zeroed) = heaps
        .alloc_single_zeroed(NodeId(0), Partition::DEFAULT, class)
        .unwrap();
    // SAFETY: as above.
    if unsafe { *again.add(8) } == 0xA5 {
        assert!(!zeroed, "a bag over dirty memory was reported zero");
    }
}

/// A refill of a class of the sparse pool: from a fresh bag, the rest of the bag as a run,
/// untouched (its memory still reads as zero where a link would have been written), in
/// address order; once objects were freed into the bag, a batch of those (linked). A run given
/// back steps the bag's carve back, so the same objects come out untouched again; a bag with
/// nothing else out goes back to its region.
#[test]
fn a_sparse_refill_hands_out_the_rest_of_a_bag_untouched_or_a_batch_of_freed_ones() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let class = class_of(5 << 10, 8).unwrap();
    let capacity = class.capacity();
    assert!(
        class.size() > DENSE_OBJECT_MAX && capacity >= 4,
        "{} B, {capacity} a bag",
        class.size(),
    );
    let take = || {
        heaps
            .take_untouched(NodeId(0), Partition::DEFAULT, class, 8)
            .unwrap()
    };
    let bags = || heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed);
    let out = || {
        heaps
            .class(NodeId(0), class)
            .out_of_bags
            .load(Ordering::Relaxed)
    };
    let mut run = take().expect_err("a fresh run");
    assert!(run.zeroed, "a fresh bag's memory reads as zero");
    assert_eq!((run.left as usize, out(), bags()), (capacity, capacity, 1));
    let mut fresh = Vec::new();
    for _ in 0..3 {
        let object = run.take(class.size());
        // SAFETY: the object is ours; its link word, had one been written, is its first.
        let first = unsafe { *(object as *const usize) };
        assert_eq!(first, 0, "a link was written");
        fresh.push(object);
    }
    assert!(fresh
        .windows(2)
        .all(|w| w[1] as usize == w[0] as usize + class.size()));
    // The bag is carved to its end: the next refill starts another bag.
    let other = take().expect_err("a second bag's run");
    assert_eq!(bags(), 2);
    heaps.return_run(class, other);
    assert_eq!(bags(), 1, "a run given back whole gives its bag back");
    // Two objects go back to the bag: the next refill is those two, linked.
    for &object in &fresh[..2] {
        // SAFETY: live objects of `class` from node 0, given up once.
        unsafe { heaps.free_single(NodeId(0), class, object) };
    }
    let batch = take().expect("the freed objects, as a batch");
    assert_eq!(batch.count, 2);
    // SAFETY: the batch's objects are linked through their first words.
    let second = unsafe { next_of(batch.head) };
    assert_eq!(second, batch.tail);
    let mut got = [batch.head, batch.tail];
    got.sort();
    assert_eq!(got, [fresh[0], fresh[1]]);
    // The rest of the run goes back: the carve steps back over it, and a refill hands the
    // same objects out again as a run, untouched.
    let rest = run;
    heaps.return_run(class, run);
    assert_eq!(out(), 3);
    let again = take().expect_err("the run again");
    assert_eq!(again, rest);
    heaps.return_run(class, again);
    for object in [batch.head, batch.tail, fresh[2]] {
        // SAFETY: each handed out above and given up once.
        unsafe { heaps.free_single(NodeId(0), class, object) };
    }
    assert_eq!((bags(), out()), (0, 0));
    // The bag fell empty and its memory, which the frees' links wrote, stays committed (the
    // budget keeps it): a bag over it hands its objects out untouched, but not as memory that
    // reads as zero (a face that marks freed blocks must clear it).
    let again = take().expect_err("a bag over used memory");
    assert_eq!(again.next, fresh[0], "the first bag's memory again");
    assert!(!again.zeroed, "a bag over used memory was reported zero");
    heaps.return_run(class, again);
    assert_eq!(bags(), 0);
}

/// An object of a run freed before its thread handed it out (a `free` of an address the
/// program computed) is named when the run goes back, instead of being handed out twice.
#[test]
fn a_run_given_back_names_an_object_freed_before_it_was_handed_out() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let class = class_of(8 << 10, 8).unwrap();
    let mut run = heaps
        .take_untouched(NodeId(0), Partition::DEFAULT, class, 8)
        .unwrap()
        .expect_err("a fresh run");
    let handed = run.take(class.size());
    let forged = (handed as usize + class.size()) as *mut u8;
    // SAFETY: the forged address is an object of the run, never handed out: the misuse the
    // test plays (a free of `p + size`), as a chain of one.
    unsafe {
        heaps.arena.write_link(forged, null_mut());
        heaps
            .return_to_bags(NodeId(0), class, forged, false)
            .unwrap();
    }
    let text = dies_with(|| heaps.return_run(class, run));
    let expected = format!("free(): invalid pointer {:#x}", forged as usize);
    assert!(text.contains(&expected), "{text}");
}

/// Runs `f` in a child process and returns what it wrote to stderr; the child must abort.
pub(crate) fn dies_with(f: impl FnOnce()) -> String {
    let mut pipe = [0; 2];
    // SAFETY: plain system calls; the child only runs `f` on the test's own heaps (nobody
    // else's lock) and aborts or exits at once.
    unsafe {
        assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
        let child = libc::fork();
        assert!(child >= 0);
        if child == 0 {
            libc::dup2(pipe[1], 2);
            f();
            libc::_exit(0);
        }
        libc::close(pipe[1]);
        let mut output = [0u8; 512];
        let read = libc::read(pipe[0], output.as_mut_ptr().cast(), output.len());
        let mut status = 0;
        assert_eq!(libc::waitpid(child, &mut status, 0), child);
        libc::close(pipe[0]);
        let text = String::from_utf8_lossy(&output[..read.max(0) as usize]).into_owned();
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT,
            "the child went on: {text}"
        );
        text
    }
}

/// A batch from a fresh bag runs in address order (head first), over a bag boundary too, and
/// its tail is the last object: a thread hands a fresh bag out ascending.
#[test]
fn a_batch_from_fresh_bags_runs_in_address_order_with_its_tail_last() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    for size in [16, 520, 8 << 10] {
        let class = class_of(size, 8).unwrap();
        // More than a bag holds: the second bag's objects follow the first's.
        let want = class.capacity() + class.capacity() / 2;
        let mut objects = Vec::new();
        let mut batches = Vec::new();
        while objects.len() < want {
            let batch = heaps
                .take_from_bags(NodeId(0), Partition::DEFAULT, class, want - objects.len())
                .unwrap();
            let mut object = batch.head;
            let mut last = null_mut();
            while !object.is_null() {
                objects.push(object as usize);
                last = object;
                // SAFETY: walking the batch we were handed.
                object = unsafe { next_of(object) };
            }
            assert_eq!(
                last, batch.tail,
                "{size} B: the tail is not the last object"
            );
            batches.push(batch.head);
        }
        let bag = class.capacity();
        for (i, pair) in objects.windows(2).enumerate() {
            if i + 1 != bag {
                assert_eq!(
                    pair[1],
                    pair[0] + class.size(),
                    "{size} B: object {i} out of order"
                );
            }
        }
        for head in batches {
            heaps.return_to_bags(NodeId(0), class, head, false).unwrap();
        }
    }
}

#[test]
fn secure_bags_carve_in_a_random_order_and_hand_each_object_out_once() {
    let heaps = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
    let class = class_of(256, 8).unwrap();
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, class.capacity())
        .unwrap();
    let mut objects = Vec::new();
    let mut object = batch.head;
    while !object.is_null() {
        objects.push(object as usize);
        // SAFETY: walking the batch we were handed (links are encoded in secure mode).
        object = unsafe { heaps.arena.read_link(object, Expect::Class(class)) };
    }
    assert_eq!(objects.len(), class.capacity());
    let ascending = objects.windows(2).filter(|w| w[1] == w[0] + 256).count();
    let descending = objects.windows(2).filter(|w| w[0] == w[1] + 256).count();
    assert!(
        ascending + descending < 16,
        "{ascending} + {descending} neighbours"
    );
    let mut sorted = objects.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), objects.len(), "an object was carved twice");
    heaps
        .return_to_bags(NodeId(0), class, batch.head, false)
        .unwrap();
    assert_eq!(
        heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
        0
    );
}

/// Bag hand-over under contention: four threads take batches of `class` from the same
/// node's bags and return them (through the ring and straight to the bags) in random order,
/// so bags are carved, fill, empty and go back to the region concurrently; with `sweep`, a
/// fifth thread sweeps every bag in a loop meanwhile. Every object handed out is marked in a
/// shared table and filled with its owner's byte, checked before it goes back: a second
/// hand-out of a live object, a loss, or a live object changed (a page released under it)
/// fails the test.
pub(in crate::node) fn hand_over_under_contention(class: SizeClass, sweep: bool) {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let size = class.size();
    let base = heaps.arena.base();
    let slots = (64usize << 20) / size;
    let owners: &'static [AtomicU8] = Box::leak((0..slots).map(|_| AtomicU8::new(0)).collect());
    let slot_of = move |object: *mut u8| (object as usize - base) / size;
    let done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let sweeper = sweep.then(|| {
        std::thread::spawn(move || {
            let mut sweeps = 0u64;
            while !done.load(Ordering::Relaxed) {
                heaps.flush_all();
                sweeps += 1;
            }
            sweeps
        })
    });
    let rounds = ((4 << 20) / size).clamp(2000, 20_000);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let byte = t as u8 + 1;
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                let mut held: Vec<*mut u8> = Vec::new();
                for round in 0..rounds {
                    crate::arena::tests::xorshift(&mut rng);
                    if rng % 3 != 0 || held.is_empty() {
                        let want = 1 + (rng % 100) as usize;
                        let batch = heaps
                            .take_from_bags(NodeId(0), Partition::DEFAULT, class, want)
                            .expect("memory");
                        let mut object = batch.head;
                        let mut count = 0;
                        while !object.is_null() {
                            let previous = owners[slot_of(object)].swap(1, Ordering::Relaxed);
                            assert_eq!(previous, 0, "object {object:p} handed out twice");
                            held.push(object);
                            // SAFETY: walking a batch we own.
                            let next = unsafe { next_of(object) };
                            // SAFETY: the object is ours, `size` bytes.
                            unsafe { object.write_bytes(byte, size) };
                            object = next;
                            count += 1;
                        }
                        assert_eq!(count, batch.count);
                    } else {
                        let give = 1 + (rng as usize / 7) % held.len();
                        let mut chain: *mut u8 = null_mut();
                        let mut tail: *mut u8 = null_mut();
                        for _ in 0..give {
                            let index = (rng as usize / 3) % held.len();
                            let object = held.swap_remove(index);
                            // SAFETY: a live object of ours, `size` bytes.
                            let bytes = unsafe { std::slice::from_raw_parts(object, size) };
                            assert!(
                                bytes.iter().all(|&b| b == byte),
                                "object {object:p} changed while live"
                            );
                            owners[slot_of(object)].store(0, Ordering::Relaxed);
                            // SAFETY: we own the object; link it into our chain.
                            unsafe { set_next(object, chain) };
                            if tail.is_null() {
                                tail = object;
                            }
                            chain = object;
                        }
                        if round % 2 == 0 {
                            heaps.release(
                                NodeId(0),
                                Partition::DEFAULT,
                                class,
                                Batch {
                                    head: chain,
                                    tail,
                                    count: give,
                                },
                            );
                        } else {
                            heaps
                                .return_to_bags(NodeId(0), class, chain, false)
                                .expect("valid objects");
                        }
                    }
                }
                for &object in &held {
                    owners[slot_of(object)].store(0, Ordering::Relaxed);
                    // SAFETY: we own the object; a one-object chain.
                    unsafe { set_next(object, null_mut()) };
                    heaps
                        .return_to_bags(NodeId(0), class, object, false)
                        .expect("valid objects");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    if let Some(sweeper) = sweeper {
        assert!(sweeper.join().unwrap() > 0);
    }
    heaps.flush_all();
    assert_eq!(
        heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
        0,
        "a bag was lost or kept"
    );
    assert_eq!(
        heaps
            .node(NodeId(0))
            .released_in_bags
            .load(Ordering::Relaxed),
        0
    );
    assert_eq!(heaps.arena.usage(0).active, 0);
}

#[test]
fn bags_hand_objects_to_one_owner_at_a_time_under_contention() {
    hand_over_under_contention(class_of(96, 8).unwrap(), false);
}

/// The objects of a batch, in its order; asserts its count and that its tail is its last.
pub(in crate::node) fn batch_objects(batch: &Batch) -> Vec<*mut u8> {
    let mut objects = Vec::new();
    let mut object = batch.head;
    while !object.is_null() {
        objects.push(object);
        // SAFETY: walking a batch the test holds.
        object = unsafe { next_of(object) };
    }
    assert_eq!(objects.len(), batch.count);
    assert_eq!(objects.last().copied(), Some(batch.tail));
    objects
}

/// Returns `objects` to their bags one at a time, first to last.
fn return_each(heaps: &NodeHeaps, class: SizeClass, objects: &[*mut u8]) {
    for &object in objects {
        // SAFETY: an object of the test's batch, ours: it becomes a chain of one.
        unsafe { heaps.arena.write_link(object, null_mut()) };
        heaps
            .return_to_bags(NodeId(0), class, object, false)
            .unwrap();
    }
}

/// The objects of a batch in secure mode's link encoding, in its order.
fn secure_batch_objects(heaps: &NodeHeaps, class: SizeClass, batch: &Batch) -> Vec<*mut u8> {
    let mut objects = Vec::new();
    let mut object = batch.head;
    while !object.is_null() {
        objects.push(object);
        // SAFETY: walking a batch the test holds.
        object = unsafe { heaps.arena.read_link(object, Expect::Class(class)) };
    }
    assert_eq!(objects.len(), batch.count);
    objects
}

/// A refill takes a bag's free objects by their bits, lowest address first whatever order
/// they came back in, and then carves on where the bag stopped; a bag with more free objects
/// than the refill wants keeps the rest for the next one. Each is counted as reused.
#[test]
fn a_refill_takes_a_bags_free_objects_lowest_address_first() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let node = NodeId(0);
    let class = class_of(64, 8).unwrap();
    let reused = || {
        heaps
            .node(node)
            .ops
            .bag_objects_reused
            .load(Ordering::Relaxed)
    };
    let take = |want| {
        heaps
            .take_from_bags(node, Partition::DEFAULT, class, want)
            .unwrap()
    };
    assert!(class.capacity() >= 130);
    // Past the first word of bits, so the refill crosses words.
    let carved = batch_objects(&take(100));
    let sorted = |indexes: &[usize]| {
        let mut objects: Vec<_> = indexes.iter().map(|&i| carved[i]).collect();
        objects.sort();
        objects
    };

    let first = [70, 3, 20, 99, 1];
    return_each(heaps, class, &first.map(|i| carved[i]));
    let refill = batch_objects(&take(8));
    assert_eq!(
        refill[..5],
        sorted(&first)[..],
        "the free objects, lowest first"
    );
    assert_eq!(reused(), 5);
    // Then the bag carves on where it stopped.
    assert_eq!(refill[5] as usize, carved[99] as usize + class.size());

    let second = [50, 10, 90, 64, 63, 11, 0, 2, 98, 40];
    return_each(heaps, class, &second.map(|i| carved[i]));
    let low = batch_objects(&take(4));
    assert_eq!(low[..], sorted(&second)[..4], "the lowest four");
    assert_eq!(reused(), 9);
    let rest = batch_objects(&take(6));
    assert_eq!(rest[..], sorted(&second)[4..], "what the first refill left");
    assert_eq!(reused(), 15);

    for chain in [&carved[..], &refill[..], &low[..], &rest[..]] {
        let mut seen: Vec<_> = chain.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), chain.len(), "an object handed out twice");
    }
}

/// A second return of an object that is free in its bag is a double free, found by its bit
/// while other objects of the bag are still out, and nothing of the bag changes.
#[test]
fn a_second_return_to_a_bag_is_a_double_free_while_others_are_out() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let class = class_of(48, 8).unwrap();
    let carved = batch_objects(
        &heaps
            .take_from_bags(NodeId(0), Partition::DEFAULT, class, 8)
            .unwrap(),
    );
    return_each(heaps, class, &carved[2..4]);
    // SAFETY: an object of the test's (now a chain of one, as a program's double free).
    unsafe { heaps.arena.write_link(carved[3], null_mut()) };
    assert!(matches!(
        heaps.return_to_bags(NodeId(0), class, carved[3], false),
        Err((object, Misuse::DoubleFree)) if object == carved[3]
    ));
    let again = batch_objects(
        &heaps
            .take_from_bags(NodeId(0), Partition::DEFAULT, class, 3)
            .unwrap(),
    );
    assert_eq!(again[..2], carved[2..4], "each free object once");
    assert_eq!(again[2] as usize, carved[7] as usize + class.size());
}

/// Secure mode: an object's return writes its link (null, encoded), and the refill that hands
/// it out again checks it. Written after its free, the process aborts naming that block
/// instead of handing it out.
#[test]
fn secure_refills_refuse_an_object_written_after_its_return() {
    let heaps = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
    let class = class_of(64, 8).unwrap();
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, 8)
        .unwrap();
    let carved = secure_batch_objects(heaps, class, &batch);
    return_each(heaps, class, &carved[..3]);
    // A program writes into a free object that waits in its bag.
    // SAFETY: a free object of the test's bag, 64 bytes.
    unsafe { (carved[1] as *mut usize).write(0x4141_4141_4141_4141) };
    let text = dies_with(|| {
        heaps.take_from_bags(NodeId(0), Partition::DEFAULT, class, 8);
    });
    let expected = format!(
        "corrupted free list: freed object {:#x}",
        carved[1] as usize
    );
    let named = format!("freed block {:#x} held ", carved[1] as usize);
    assert!(text.contains(&expected) || text.contains(&named), "{text}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any sequence of refills, returns (as chains, or one by one, in any order) and forced
    /// sweeps of one class keeps the bags' free bits exact: no object is handed out while the
    /// test holds it, the bytes past each held object's link survive, and once everything is
    /// back every bag has gone back to its region with nothing counted as released in bags.
    #[test]
    fn bag_bits_follow_any_sequence_of_takes_returns_and_sweeps(
        size in proptest::sample::select(vec![16usize, 48, 256, 1024, 5000, 8192, 100_000]),
        steps in proptest::collection::vec((0u8..4, 1usize..300, proptest::prelude::any::<u64>()), 1..50),
    ) {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let node = NodeId(0);
        let class = class_of(size, 8).unwrap();
        let mut held: Vec<*mut u8> = Vec::new();
        let mut holding = std::collections::HashSet::new();
        // A word past the link of each held object names it.
        let stamp = |object: *mut u8| {
            // SAFETY: a held object of at least 16 bytes.
            unsafe { (object.add(8) as *mut usize).write(object as usize) }
        };
        let stamped = |object: *mut u8| {
            // SAFETY: as above.
            unsafe { (object.add(8) as *const usize).read() == object as usize }
        };
        for (kind, count, seed) in steps {
            let mut random = seed | 1;
            let mut next = || {
                crate::arena::tests::xorshift(&mut random);
                random as usize
            };
            match kind {
                0 if (held.len() + count) * class.size() <= 16 << 20 => {
                    let Some(batch) = heaps.take_from_bags(node, Partition::DEFAULT, class, count)
                    else {
                        continue;
                    };
                    for object in batch_objects(&batch) {
                        proptest::prop_assert!(holding.insert(object), "handed out twice");
                        stamp(object);
                        held.push(object);
                    }
                }
                1 | 2 if !held.is_empty() => {
                    let take = count.min(held.len());
                    let mut chosen = Vec::new();
                    for _ in 0..take {
                        chosen.push(held.swap_remove(next() % held.len()));
                    }
                    for &object in &chosen {
                        proptest::prop_assert!(stamped(object), "a held object was written");
                        holding.remove(&object);
                    }
                    if kind == 1 {
                        let mut chain = null_mut();
                        for &object in &chosen {
                            // SAFETY: ours, linked into the chain we return.
                            unsafe { set_next(object, chain) };
                            chain = object;
                        }
                        proptest::prop_assert!(heaps.return_to_bags(node, class, chain, false).is_ok());
                    } else {
                        return_each(heaps, class, &chosen);
                    }
                }
                3 => heaps.flush_all(),
                _ => {}
            }
        }
        for &object in &held {
            proptest::prop_assert!(stamped(object), "a held object was written");
        }
        return_each(heaps, class, &held);
        proptest::prop_assert_eq!(heaps.class(node, class).bags.load(Ordering::Relaxed), 0);
        proptest::prop_assert_eq!(
            heaps.node(node).released_in_bags.load(Ordering::Relaxed),
            0
        );
    }
}
