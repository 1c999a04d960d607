//! Tests of a thread list alone (`cache.rs`), on words of the test's own as objects.

use super::cache::FreeList;
use crate::ds::{next_of, set_next};
use crate::node::Batch;
use crate::size_class::{class_of, SizeClass};
use core::ptr::null_mut;

/// A configured list of 64-byte objects, and `times` its limit of words to serve as objects.
fn list_of_words(times: usize) -> (SizeClass, FreeList, Vec<usize>) {
    let class = class_of(64, 8).unwrap();
    let mut list = FreeList::EMPTY;
    list.configure(class);
    let words = vec![0usize; times * list.limit()];
    (class, list, words)
}

/// The words as objects of a list (each one word: enough for its link).
fn objects_of(words: &mut [usize]) -> Vec<*mut u8> {
    words
        .iter_mut()
        .map(|w| w as *mut usize as *mut u8)
        .collect()
}

/// Links `objects` in order into a batch.
fn chain(objects: &[*mut u8]) -> Batch {
    for (i, &object) in objects.iter().enumerate() {
        let next = objects.get(i + 1).copied().unwrap_or(null_mut());
        // SAFETY: the objects are the caller's own words.
        unsafe { set_next(object, next) };
    }
    Batch {
        head: objects[0],
        tail: objects[objects.len() - 1],
        count: objects.len(),
    }
}

/// A list emptied by pops takes the object of its next push as its tail, and the counts it
/// publishes say what the pops and pushes did (the allocations derived from the count).
#[test]
fn a_list_emptied_by_pops_takes_its_next_push_as_its_tail_and_counts_its_pops() {
    let (class, mut list, mut words) = list_of_words(2);
    let limit = list.limit();
    let objects = objects_of(&mut words);
    list.install(chain(&objects[..3]), false);
    assert_eq!(list.take_counts(), (0, 0), "an install is neither");
    for _ in 0..3 {
        let object = list.head;
        // SAFETY: popping our own words.
        list.head = unsafe { next_of(object) };
        list.popped(object);
    }
    assert_eq!(list.len(), 0);
    let pushed = &objects[3..3 + limit];
    // SAFETY: as above.
    unsafe { set_next(pushed[0], list.head) };
    assert!(!list.push(pushed[0]), "a push onto an empty list is fast");
    assert_eq!(list.tail(), pushed[0]);
    let mut cut = None;
    for &object in &pushed[1..] {
        // SAFETY: as above.
        unsafe { set_next(object, list.head) };
        if list.push(object) {
            cut = list.arm_or_cut(
                false,
                // SAFETY: as above.
                |o| unsafe { next_of(o) },
                // SAFETY: as above.
                |o, n| unsafe { set_next(o, n) },
            );
        }
    }
    let cut = cut.expect("the pushes reached the limit");
    assert_eq!(cut.tail, pushed[0], "the cut ends at the oldest push");
    assert_eq!(cut.count, limit - class.batch());
    assert_eq!(list.len(), class.batch());
    assert_eq!(list.take_counts(), (3, limit as u32));
    assert_eq!(list.take_counts(), (0, 0));
}

/// A list handed a refill larger than its drain (another thread's grown list cut it) arms its
/// marker on the object with `behind` objects behind it, found by walking the newer ones: a
/// pop of that object disarms, and at the limit the cut keeps the newest batch, as an armed
/// list's does.
#[test]
fn a_list_past_its_arming_point_arms_on_the_right_object_and_cuts_its_oldest() {
    let (class, mut list, mut words) = list_of_words(4);
    let limit = list.limit();
    let batch = class.batch();
    let behind = limit - batch;
    let objects = objects_of(&mut words);
    // A chain of limit - 2 objects (head `objects[0]`), installed whole: past `behind + 1`.
    let given = limit - 2;
    assert!(given > behind + 1, "the class's batch is at least 3");
    list.install(chain(&objects[..given]), false);
    let push = |list: &mut FreeList, object: *mut u8| {
        // SAFETY: the list's objects are our own words.
        unsafe { set_next(object, list.head) };
        if !list.push(object) {
            return None;
        }
        Some(list.arm_or_cut(
            false,
            // SAFETY: as above.
            |o| unsafe { next_of(o) },
            // SAFETY: as above.
            |o, n| unsafe { set_next(o, n) },
        ))
    };
    // The first push arms (below the limit, no cut) on the object `behind` from the tail.
    assert_eq!(push(&mut list, objects[given]), Some(None), "the push arms");
    // Pops down to `behind`: the last one hands out the marked object and disarms.
    let mut popped = Vec::new();
    while list.len() > behind {
        let object = list.head;
        // SAFETY: as above.
        list.head = unsafe { next_of(object) };
        list.popped(object);
        popped.push(object);
    }
    let marked = objects[given - 1 - behind];
    assert_eq!(
        *popped.last().unwrap(),
        marked,
        "the marked object is the last pop"
    );
    // Pushed back up, and one more: the push to `rest` arms on the marked object again (past
    // the slack's newer objects), the limit cuts behind it.
    let mut cut = None;
    for &object in popped.iter().rev().chain([&objects[given + 1]]) {
        if let Some(result) = push(&mut list, object) {
            cut = result;
        }
    }
    assert_eq!(list.len(), limit - behind, "the cut keeps the newest batch");
    let cut = cut.expect("a list at its limit must be cut");
    assert_eq!(cut.count, behind);
    assert_eq!(cut.head, objects[given - behind]);
    assert_eq!(cut.tail, objects[given - 1]);
    assert_eq!(list.tail(), marked);
    // SAFETY: as above.
    assert!(unsafe { next_of(list.tail()) }.is_null());
}

/// A list holding more than its limit (a lowered limit, a refill of another thread's grown
/// list) cuts everything but its newest batch at the next push, in one cut.
#[test]
fn a_list_past_its_limit_keeps_its_newest_batch_in_one_cut() {
    let (class, mut list, mut words) = list_of_words(4);
    let limit = list.limit();
    let objects = objects_of(&mut words);
    let given = 3 * limit;
    assert!(objects.len() > given);
    list.install(chain(&objects[..given]), false);
    let pushed = objects[given];
    // SAFETY: the list's objects are our own words.
    unsafe { set_next(pushed, list.head) };
    assert!(list.push(pushed));
    let cut = list
        .arm_or_cut(
            false,
            // SAFETY: as above.
            |o| unsafe { next_of(o) },
            // SAFETY: as above.
            |o, n| unsafe { set_next(o, n) },
        )
        .expect("a list past its limit must be cut");
    // The list is `pushed`, then `objects[0..given]`: the cut keeps the first `keep`.
    let keep = class.batch();
    assert_eq!(list.len(), keep);
    assert_eq!(cut.count, given + 1 - keep);
    assert_eq!(cut.head, objects[keep - 1]);
    assert_eq!(cut.tail, objects[given - 1]);
    assert_eq!(list.head, pushed);
    assert_eq!(list.tail(), objects[keep - 2]);
    // SAFETY: as above.
    assert!(unsafe { next_of(list.tail()) }.is_null());
}

/// A push and a pop in turn where the marker disarms (a thread that frees and allocates a class
/// in random order wanders around that count) never take the slow path: the marker arms only
/// past a slack above `behind + 1`, and the list still cuts its oldest at its limit.
#[test]
fn a_list_wandering_where_its_marker_disarms_stays_on_the_fast_path() {
    let (class, mut list, mut words) = list_of_words(2);
    let limit = list.limit();
    let behind = limit - class.batch();
    let objects = objects_of(&mut words);
    list.install(chain(&objects[..behind]), false);
    let mut slow = 0;
    let mut cut = None;
    let mut push = |list: &mut FreeList, object: *mut u8, slow: &mut usize| {
        // SAFETY: the list's objects are our own words.
        unsafe { set_next(object, list.head) };
        if list.push(object) {
            *slow += 1;
            cut = cut.or(list.arm_or_cut(
                false,
                // SAFETY: as above.
                |o| unsafe { next_of(o) },
                // SAFETY: as above.
                |o, n| unsafe { set_next(o, n) },
            ));
        }
    };
    for _ in 0..1000 {
        push(&mut list, objects[behind], &mut slow);
        let object = list.head;
        // SAFETY: as above.
        list.head = unsafe { next_of(object) };
        list.popped(object);
        assert_eq!(object, objects[behind]);
    }
    assert_eq!(slow, 0, "pushes to behind + 1 took the slow path");
    for &object in &objects[behind..=limit] {
        push(&mut list, object, &mut slow);
        assert!(list.len() <= limit);
    }
    let cut = cut.expect("a list at its limit must be cut");
    assert_eq!((cut.head, cut.tail), (objects[0], objects[behind - 1]));
    assert_eq!(cut.count, behind);
}
