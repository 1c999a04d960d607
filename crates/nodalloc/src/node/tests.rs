//! Unit tests of the node heaps: secure large objects and carving, zeroed carving, and the bag
//! hand-over under contention (`hand_over_under_contention`, shared with the sweep's tests).

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

/// A transfer ring holds at most `ring_objects` objects, however large the batches released
/// to it (a grown thread list cuts many batches' worth at once); the rest goes to the bags, and
/// every object is accounted for.
#[test]
fn a_ring_holds_no_more_than_its_byte_budget_whatever_the_batch_sizes() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let class = class_of(8192, 8).unwrap();
    let bound = ring_objects(class);
    let class_heap = heaps.class(NodeId(0), class);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    for count in [
        1,
        class.batch(),
        3 * class.batch(),
        bound,
        bound + 1,
        10 * class.batch(),
    ] {
        let batch = heaps
            .take_from_bags(NodeId(0), Partition::DEFAULT, class, count)
            .unwrap();
        // A batch from the bags may be short; count what it holds.
        let mut held = 0;
        let mut object = batch.head;
        while !object.is_null() {
            held += 1;
            // SAFETY: walking the batch we were handed.
            object = unsafe { next_of(object) };
        }
        heaps.release(
            NodeId(0),
            Partition::DEFAULT,
            class,
            Batch {
                count: held,
                ..batch
            },
        );
        let in_ring = ring.in_ring.load(Ordering::Relaxed);
        assert!(
            in_ring <= bound,
            "{in_ring} objects in a ring bounded by {bound}"
        );
    }
    assert!(
        ring.in_ring.load(Ordering::Relaxed) > 0,
        "the ring took nothing"
    );
    heaps.flush_all();
    assert_eq!(ring.in_ring.load(Ordering::Relaxed), 0);
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
}

/// A large block the region refuses while a ring holds the objects of a bag gets their span:
/// the rings go back to their bags before the refusal (under `RLIMIT_AS` the big classes'
/// rings held 11 MiB of a 128 MiB region when a 4 MiB block found no hole).
#[test]
fn a_large_block_the_region_refuses_gets_the_span_of_a_bag_the_rings_kept() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let class = class_of(16 << 10, 8).unwrap();
    let mut objects: Vec<usize> = super::sweep::tests::take_all(heaps, class)
        .into_iter()
        .map(|object| object as usize)
        .collect();
    assert!(
        heaps.arena.alloc_span(0, 1, 1, SpanUse::Large).is_none(),
        "the region is full"
    );
    // One bag's objects, every one of them, into the ring.
    objects.sort_unstable();
    let bag: Vec<usize> = objects[..class.capacity()].to_vec();
    assert!(class.capacity() <= ring_objects(class));
    let mut head = null_mut();
    for &object in bag.iter().rev() {
        // SAFETY: the test holds the object; it links it into its batch.
        unsafe { set_next(object as *mut u8, head) };
        head = object as *mut u8;
    }
    let batch = Batch {
        head,
        tail: *bag.last().unwrap() as *mut u8,
        count: bag.len(),
    };
    heaps.release(NodeId(0), Partition::DEFAULT, class, batch);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    assert_eq!(ring.in_ring.load(Ordering::Relaxed), bag.len());
    assert!(heaps.arena.alloc_span(0, 1, 1, SpanUse::Large).is_none());
    let large = heaps.alloc_large(NodeId(0), class.bag_bytes(), 8);
    assert_eq!(
        large as usize, bag[0],
        "the bag's span, given back by the ring"
    );
    assert_eq!(ring.in_ring.load(Ordering::Relaxed), 0);
    heaps.free_large(large as usize);
}

/// Takes `count` objects of `class` from node 0's bags and releases them as a thread's drained
/// batch would be (into the ring, or back to the bags when the ring refuses them).
fn release_from_bags(heaps: &NodeHeaps, class: SizeClass, count: usize) {
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, count)
        .unwrap();
    assert_eq!(batch.count, count);
    heaps.release(NodeId(0), Partition::DEFAULT, class, batch);
}

/// A ring's budget grows while threads overflow it and others take from it (doubling per
/// refusal that follows a pop, up to `ring_objects_max`), never without a taker, and falls back
/// to the base one halving per upkeep pass that saw no refusal.
#[test]
fn a_rings_budget_follows_a_flow_from_freeing_to_allocating_threads() {
    let heaps = NodeHeaps::create(test_arena(1, 256 << 20, 0)).unwrap();
    let class = class_of(64, 8).unwrap();
    let (base, max) = (ring_objects(class), ring_objects_max(class));
    assert!(max >= 4 * base, "{base} .. {max}");
    let class_heap = heaps.class(NodeId(0), class);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    let in_ring = || ring.in_ring.load(Ordering::Relaxed);
    let release = |count: usize| release_from_bags(heaps, class, count);
    let step = class.batch();
    // Only frees: the ring fills to its base budget and stays there.
    for _ in 0..2 * base / step {
        release(step);
    }
    assert!(
        in_ring() <= base && in_ring() + step > base,
        "{}",
        in_ring()
    );
    assert_eq!(ring.budget(class), base);
    // A taker: each refusal after a pop doubles the budget, and the refused batch goes in.
    let mut budgets = vec![base];
    for _ in 0..16 {
        let taken = heaps
            .ring_refill(NodeId(0), Partition::DEFAULT, class)
            .unwrap();
        while in_ring() + step <= ring.budget(class).min(RING_SLOTS * step) {
            release(step);
        }
        let before = in_ring();
        release(step);
        assert!(in_ring() <= ring.budget(class));
        if ring.budget(class) > *budgets.last().unwrap() {
            // (Unless the ring's slots are what refused it.)
            assert!(
                in_ring() == before + step || before + step > RING_SLOTS * step,
                "the refused batch was not offered again: {before} -> {}",
                in_ring()
            );
            budgets.push(ring.budget(class));
        }
        // SAFETY: the popped batch's objects are ours, of `class`, from node 0.
        if let Err((object, misuse)) = heaps.return_to_bags(NodeId(0), class, taken.head, false) {
            panic!("{object:?}: {misuse:?}");
        }
    }
    assert!(budgets.len() >= 3, "the budget did not grow: {budgets:?}");
    assert!(budgets.windows(2).all(|w| w[1] == (2 * w[0]).min(max)));
    assert!(*budgets.last().unwrap() <= max);
    // The flow stops: each upkeep pass without a refusal halves the budget, down to the base.
    let grown = ring.budget(class);
    let period = upkeep_period(heaps.arena.decommit.delay_ns);
    let mut now = heaps.node(NodeId(0)).next_upkeep.load(Ordering::Relaxed) + 1;
    let mut passes = 0;
    while ring.budget(class) > base {
        heaps.upkeep(NodeId(0), now);
        now += period + 1;
        passes += 1;
        assert!(passes <= 8, "the budget did not decay");
    }
    assert!(passes >= 1 && grown > base);
    assert_eq!(ring.budget.load(Ordering::Relaxed), 0);
    heaps.flush_all();
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
}

/// Flows through the rings of many classes at once grow their budgets together by at most
/// `NODE_RING_GROWN_BYTES`: the first classes' rings reach their most, a later one stays
/// nearer its base, and the node's count of grown bytes is what the budgets add to their bases,
/// back to zero once the upkeep passes have decayed every budget.
#[test]
fn the_rings_of_a_node_grow_together_within_the_nodes_budget() {
    let heaps = NodeHeaps::create(test_arena(1, 512 << 20, 0)).unwrap();
    let node = NodeId(0);
    let classes: Vec<SizeClass> = [2048, 4096, 8192, 16384]
        .iter()
        .map(|&size| class_of(size, 8).unwrap())
        .collect();
    let grown = &heaps.node(node).ring_grown_bytes;
    let counted = || {
        classes
            .iter()
            .map(|&class| {
                let ring = heaps.ring_in(node, Partition::DEFAULT, class);
                (ring.budget(class) - ring_objects(class)) * class.size()
            })
            .sum::<usize>()
    };
    for &class in &classes {
        let ring = heaps.ring_in(node, Partition::DEFAULT, class);
        let step = class.batch();
        let release = || release_from_bags(heaps, class, step);
        for _ in 0..12 {
            // A taker, then a refused batch: the budget doubles if the node's budget allows.
            while ring.in_ring.load(Ordering::Relaxed) + step <= ring.budget(class) {
                release();
            }
            let taken = heaps.ring_refill(node, Partition::DEFAULT, class).unwrap();
            if let Err((object, misuse)) = heaps.return_to_bags(node, class, taken.head, false) {
                panic!("{object:?}: {misuse:?}");
            }
            release();
            release();
            assert!(grown.load(Ordering::Relaxed) <= NODE_RING_GROWN_BYTES);
            assert_eq!(grown.load(Ordering::Relaxed), counted());
        }
    }
    let first = classes[0];
    assert_eq!(
        heaps.ring_in(node, Partition::DEFAULT, first).budget(first),
        ring_objects_max(first)
    );
    let last = *classes.last().unwrap();
    assert!(heaps.ring_in(node, Partition::DEFAULT, last).budget(last) < ring_objects_max(last));
    assert!(grown.load(Ordering::Relaxed) > NODE_RING_GROWN_BYTES / 2);
    let period = upkeep_period(heaps.arena.decommit.delay_ns);
    let mut now = heaps.node(node).next_upkeep.load(Ordering::Relaxed) + 1;
    for _ in 0..16 {
        heaps.upkeep(node, now);
        now += period + 1;
        assert_eq!(grown.load(Ordering::Relaxed), counted());
    }
    assert_eq!(grown.load(Ordering::Relaxed), 0);
    heaps.flush_all();
}

/// The ring's object count is a hint that a pop's subtraction can leave briefly below zero
/// (wrapped); a release that reads it then must neither overflow nor lose its batch.
#[test]
fn a_release_that_reads_a_wrapped_ring_count_keeps_its_batch() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let class = class_of(64, 8).unwrap();
    let class_heap = heaps.class(NodeId(0), class);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, class.batch())
        .unwrap();
    ring.in_ring.store(usize::MAX, Ordering::Relaxed);
    heaps.release(NodeId(0), Partition::DEFAULT, class, batch);
    ring.in_ring.fetch_add(1, Ordering::Relaxed);
    heaps.flush_all();
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
}

/// The node heap's shared-operation counters (`SharedOps`), read as one array.
fn shared_ops(heaps: &NodeHeaps, node: NodeId) -> [u64; 11] {
    let ops = &heaps.node(node).ops;
    [
        &ops.class_locks,
        &ops.contended_locks,
        &ops.ring_pushes,
        &ops.ring_pops,
        &ops.ring_retries,
        &ops.inbox_pushes,
        &ops.inbox_takes,
        &ops.bag_objects_taken,
        &ops.bag_objects_returned,
        &ops.heaps_attached,
        &ops.heaps_retired,
    ]
    .map(|counter| counter.load(Ordering::Relaxed))
}

/// What each step added to the counters since `before` (and moves `before` on).
fn ops_added(heaps: &NodeHeaps, before: &mut [u64; 11], span_locks: &mut u64) -> [u64; 12] {
    let now = shared_ops(heaps, NodeId(0));
    let spans = heaps.arena.usage(0).span_locks;
    let mut added = [0; 12];
    for (index, (now, before)) in now.iter().zip(before.iter()).enumerate() {
        added[index] = now - before;
    }
    added[11] = spans - *span_locks;
    (*before, *span_locks) = (now, spans);
    added
}

/// Each shared-structure operation of a single thread counts exactly once: a refill from a
/// new bag takes the class lock and a span lock once and a batch of objects out of the bag;
/// a release to the ring is one push, a ring refill one pop; a return to the bags takes the
/// class lock once and returns every object (and the emptied bag's span lock); a remote free
/// is one inbox push, and its sorting one take with one class lock. Nobody else runs, so
/// nothing is contended and no ring operation retries; the snapshot reports the same figures.
#[test]
fn shared_operations_are_counted_once_each_with_their_objects() {
    // Order of `ops_added`: class locks, contended, ring pushes, ring pops, ring retries, inbox
    // pushes, inbox takes, objects taken, objects returned, heaps attached, retired, span locks.
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let node = NodeId(0);
    let class = class_of(64, 8).unwrap();
    let want = class.batch();
    let (mut before, mut spans) = ([0; 11], 0);
    assert_eq!(ops_added(heaps, &mut before, &mut spans), [0; 12]);

    let batch = heaps
        .take_from_bags(node, Partition::DEFAULT, class, want)
        .unwrap();
    assert_eq!(batch.count, want);
    let taken = want as u64;
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [1, 0, 0, 0, 0, 0, 0, taken, 0, 0, 0, 1],
        "a refill from a new bag"
    );

    heaps.release(node, Partition::DEFAULT, class, batch);
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "a release into the ring"
    );
    let popped = heaps.ring_refill(node, Partition::DEFAULT, class).unwrap();
    assert_eq!(popped, batch);
    assert!(heaps.ring_refill(node, Partition::DEFAULT, class).is_none());
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        "a refill from the ring (then an empty ring, not a pop)"
    );

    // Half the batch to the inbox, as another node's thread would send it, half to the bags.
    let mut split = batch.head;
    for _ in 1..want / 2 {
        // SAFETY: walking the batch we hold.
        split = unsafe { next_of(split) };
    }
    // SAFETY: as above; `split` is inside the batch.
    let rest = unsafe { next_of(split) };
    // SAFETY: `split` is ours; the first half now ends there.
    unsafe { set_next(split, null_mut()) };
    // SAFETY: a well-formed chain of freed objects of node 0, ours to give.
    unsafe { heaps.send_remote(node, rest, batch.tail, want - want / 2) };
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
        "a remote free's chain"
    );
    heaps
        .return_to_bags(node, class, batch.head, false)
        .unwrap();
    let half = (want / 2) as u64;
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [1, 0, 0, 0, 0, 0, 0, 0, half, 0, 0, 0],
        "a return to the bags"
    );
    heaps.drain_inbox(node);
    heaps.drain_inbox(node);
    // The bag's last objects come back: it goes to the region under its span lock.
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [1, 0, 0, 0, 0, 0, 1, 0, taken - half, 0, 0, 1],
        "an inbox sorted into the bags (then an empty inbox, not a take)"
    );

    let stats = heaps.collect_stats(0);
    let node_stats = &stats.nodes()[0].shared;
    assert_eq!(
        [
            node_stats.class_locks,
            node_stats.ring_pushes,
            node_stats.ring_pops,
            node_stats.inbox_pushes,
            node_stats.inbox_takes,
            node_stats.bag_objects_taken,
            node_stats.bag_objects_returned,
            node_stats.span_locks,
        ],
        [3, 1, 1, 1, 1, taken, taken, spans]
    );
    assert_eq!(
        (stats.shared.class_locks, stats.shared.span_locks),
        (3, spans)
    );
    assert_eq!(node_stats.contended_locks + node_stats.ring_retries, 0);
}

/// Small objects at a tier's limit: a near node's refills take the far node's bags once the
/// near tier is full (its steal reaches the far node last), and none at all while requests are
/// bound to their tier; frees make room in the tier again.
#[test]
fn small_objects_past_the_near_limit_come_from_the_far_node_unless_bound() {
    let arena = crate::arena::tests::tiered_test_arena();
    let heaps = NodeHeaps::create(arena).unwrap();
    let class = class_of(64, 8).unwrap();
    let bag = class.bag_bytes();
    arena.tier_budget(false).set_limit(4 * bag);
    let origin = |p: *mut u8| arena.origin_of(p as usize).unwrap();
    let mut near = Vec::new();
    loop {
        let p = heaps.alloc_single(NodeId(0), Partition::DEFAULT, class);
        assert!(!p.is_null());
        if origin(p) == 2 {
            // SAFETY: just handed out, of `class`, from node 2.
            unsafe { heaps.free_single(NodeId(2), class, p) };
            break;
        }
        near.push(p);
    }
    assert_eq!(
        near.len(),
        4 * class.capacity(),
        "four bags' objects near, then far"
    );
    arena.set_tier_bound(true);
    assert!(
        heaps
            .alloc_single(NodeId(1), Partition::DEFAULT, class)
            .is_null(),
        "bound: neither a new near bag nor the far node's objects"
    );
    for p in near.drain(..) {
        // SAFETY: handed out above, of `class`, and not freed since.
        unsafe { heaps.free_single(NodeId(origin(p)), class, p) };
    }
    let p = heaps.alloc_single(NodeId(1), Partition::DEFAULT, class);
    assert!(!p.is_null() && origin(p) != 2, "room again near");
    // SAFETY: as above.
    unsafe { heaps.free_single(NodeId(origin(p)), class, p) };
    arena.set_tier_bound(false);
    arena.tier_budget(false).set_limit(0);
}

/// Automatic tiering on a simulated machine with a far node (nothing is bound there, so the
/// moves are records alone): a busy partition stays hot; one quiet for the cooling period
/// turns cold, its refills come from the far node and its full bag is recorded as moved
/// (`placed_node` names the far node for its objects) while a partial bag stays; busy again,
/// it comes back near. A moved bag whose objects all come back returns to its region.
#[test]
fn automatic_tiering_cools_quiet_partitions_moves_their_full_bags_and_warms_busy_ones() {
    let arena = crate::arena::tests::tiered_test_arena();
    let heaps = NodeHeaps::create_with(arena, 8).unwrap();
    let ms = 1_000_000u64;
    assert!(heaps.set_tiering(1000 * ms));
    let (busy, cache) = (Partition(3), Partition(5));
    let class = class_of(64, 8).unwrap();
    let capacity = class.capacity();
    // The cache fills one bag whole and starts a second; every object stays out.
    let full = heaps
        .take_from_bags(NodeId(0), cache, class, capacity)
        .unwrap();
    assert_eq!(full.count, capacity);
    let partial = heaps.take_from_bags(NodeId(0), cache, class, 4).unwrap();
    heaps.note_activity(cache);
    let first = full.head;
    let other_bag = partial.head;
    assert_ne!(
        arena.bag_at(first as usize).unwrap().start,
        arena.bag_at(other_bag as usize).unwrap().start
    );
    let mut now = 1_000 * ms;
    heaps.tiering_pass(now);
    // Ten seconds of passes every 100 ms: the request partition is busy in each.
    for _ in 0..100 {
        now += 100 * ms;
        for _ in 0..10 {
            heaps.note_activity(busy);
        }
        heaps.tiering_pass(now);
    }
    assert!(!heaps.is_cold(busy), "a busy partition stays hot");
    assert!(heaps.is_cold(cache), "a quiet one turns cold");
    assert_eq!(heaps.cold_source(NodeId(0), cache), Some(NodeId(2)));
    assert_eq!(heaps.cold_source(NodeId(0), busy), None);
    assert_eq!(
        heaps.cold_source(NodeId(2), cache),
        None,
        "the far node has no far node"
    );
    assert_eq!(
        heaps.placed_node(NodeId(0), first as usize),
        NodeId(2),
        "full bag moved"
    );
    assert_eq!(
        heaps.placed_node(NodeId(0), other_bag as usize),
        NodeId(0),
        "a bag with objects still to hand out stays"
    );
    assert_eq!(heaps.bags_moved(), (1, 0));
    let stats = heaps.collect_stats(0);
    assert!(stats.tiering && stats.cold_partitions == 1 && stats.bags_moved_far == 1);
    // Busy again: back near, the bag too.
    now += 100 * ms;
    for _ in 0..20 {
        heaps.note_activity(cache);
    }
    heaps.tiering_pass(now);
    assert!(!heaps.is_cold(cache));
    assert_eq!(heaps.placed_node(NodeId(0), first as usize), NodeId(0));
    assert_eq!(heaps.bags_moved(), (1, 1));
    // Cold again, moved again; then every object comes back: the bag goes home whole.
    for _ in 0..12 {
        now += 100 * ms;
        heaps.tiering_pass(now);
    }
    assert!(heaps.is_cold(cache));
    assert_eq!(heaps.bags_moved(), (2, 1));
    // Under a tier's limit no bag moves far (it would stay charged near): warm, then cool
    // again with a near limit set; the bag comes back and stays.
    for _ in 0..20 {
        heaps.note_activity(cache);
    }
    now += 100 * ms;
    heaps.tiering_pass(now);
    assert_eq!(heaps.bags_moved(), (2, 2));
    arena.tier_budget(false).set_limit(1 << 30);
    for _ in 0..12 {
        now += 100 * ms;
        heaps.tiering_pass(now);
    }
    assert!(heaps.is_cold(cache));
    assert_eq!(heaps.bags_moved(), (2, 2), "no move far under a limit");
    assert_eq!(heaps.placed_node(NodeId(0), first as usize), NodeId(0));
    arena.tier_budget(false).set_limit(0);
    for _ in 0..2 {
        now += 100 * ms;
        heaps.tiering_pass(now);
    }
    assert_eq!(heaps.bags_moved(), (3, 2), "without the limit, far again");
    let start = arena.bag_at(first as usize).unwrap().start;
    // Both chains were handed out above, whole, and hold nothing the test uses.
    heaps
        .return_to_bags(NodeId(0), class, full.head, false)
        .unwrap();
    heaps
        .return_to_bags(NodeId(0), class, partial.head, false)
        .unwrap();
    assert!(
        arena.bag_at(start).is_none(),
        "the moved bag went back to its region"
    );
}

/// A move the kernel leaves part done (a page a forked child still shares) is tried again on
/// the next pass; while retries complete nothing they wait twice as long each round; a bag
/// that went back to its region leaves the list.
#[test]
fn automatic_tiering_tries_again_the_moves_the_kernel_left_part_done() {
    let arena = crate::arena::tests::tiered_test_arena();
    let heaps = NodeHeaps::create_with(arena, 8).unwrap();
    let tiering = &heaps.partitions.tiering;
    let ms = 1_000_000u64;
    assert!(heaps.set_tiering(1000 * ms));
    let cache = Partition(5);
    let class = class_of(64, 8).unwrap();
    let capacity = class.capacity();
    let bags: Vec<Batch> = (0..3)
        .map(|_| {
            heaps
                .take_from_bags(NodeId(0), cache, class, capacity)
                .unwrap()
        })
        .collect();
    assert!(bags.iter().all(|bag| bag.count == capacity));
    heaps.note_activity(cache);
    let mut now = 1_000 * ms;
    heaps.tiering_pass(now);
    let mut pass = || {
        now += 100 * ms;
        heaps.tiering_pass(now);
    };
    // Two of the three moves far are left part done: both wait, and the next pass completes
    // them.
    tiering.play_partly.store(2, Ordering::Relaxed);
    while !heaps.is_cold(cache) {
        pass();
    }
    assert_eq!(heaps.bags_moved(), (3, 0));
    assert_eq!(heaps.moves_partly(), (2, 2));
    pass();
    assert_eq!(heaps.moves_partly(), (2, 0), "retried and completed");
    for bag in &bags {
        assert_eq!(heaps.placed_node(NodeId(0), bag.head as usize), NodeId(2));
    }
    // Busy again, every move back near left part done, and every retry too (a child that
    // lives on): 40 passes try each bag in 6 rounds (waits of 1, 2, 4, 8 and 16 passes), not
    // in 40.
    tiering.play_partly.store(usize::MAX, Ordering::Relaxed);
    for _ in 0..20 {
        heaps.note_activity(cache);
    }
    pass();
    assert!(!heaps.is_cold(cache));
    assert_eq!(heaps.bags_moved(), (3, 3));
    assert_eq!(heaps.moves_partly(), (5, 3));
    for _ in 0..40 {
        for _ in 0..20 {
            heaps.note_activity(cache);
        }
        pass();
    }
    let (tries, waiting) = heaps.moves_partly();
    assert_eq!(waiting, 3);
    assert_eq!(tries - 5, 6 * 3, "retries back off while none completes");
    // The child exits: the retries complete within the longest wait.
    tiering.play_partly.store(0, Ordering::Relaxed);
    for _ in 0..=tiering::MAX_RETRY_WAIT {
        for _ in 0..20 {
            heaps.note_activity(cache);
        }
        pass();
    }
    assert_eq!(heaps.moves_partly(), (tries, 0));
    // A bag that leaves before its retry leaves the list: one move far left part done, then
    // every object comes back (the bags go home).
    tiering.play_partly.store(1, Ordering::Relaxed);
    while !heaps.is_cold(cache) {
        pass();
    }
    assert_eq!(heaps.moves_partly().1, 1);
    tiering.retry_in.store(0, Ordering::Relaxed);
    for bag in &bags {
        // Each chain was handed out whole above and holds nothing the test uses.
        heaps
            .return_to_bags(NodeId(0), class, bag.head, false)
            .unwrap();
    }
    pass();
    assert_eq!(heaps.moves_partly(), (tries + 1, 0));
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
